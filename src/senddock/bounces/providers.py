"""Provider events: check each one's signature, then read it into findings. No I/O here.

| provider | how it proves itself                                   | what we read               |
|----------|--------------------------------------------------------|----------------------------|
| SES/SNS  | RSA signature over the canonical fields, by a cert     | Bounce / Complaint         |
|          | fetched from an allowed SNS host (SignatureVersion 1:  | notifications and events   |
|          | SHA1, 2: SHA256); subscriptions are confirmed          |                            |
| Mailgun  | HMAC-SHA256(signing key, timestamp + token), fresh     | failed / complained        |
| SendGrid | ECDSA P-256 SHA256 over timestamp + raw body, with the | bounce / blocked /         |
|          | account's verification key                             | spamreport                 |
| Postmark | HTTP basic auth on the webhook URL (checked by the web | Bounce / SpamComplaint     |
|          | layer: Postmark signs nothing)                         |                            |

Each reader returns findings like `bounces.parse` does, with the provider's own words for the
kind (a permanent bounce of an address that does not exist is `hard`, a full mailbox `soft`,
content or reputation `policy`, a spam report `complaint`); what is not a bounce (delivery,
delay, open) reads as no findings. A bad signature raises `Forged`: the caller answers 401/403
and changes nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from senddock.bounces.classify import Kind, classify, reply_in, status_in
from senddock.bounces.finding import Finding

# Amazon's SNS certificate hosts, `sns.<region>.amazonaws.com` (GovCloud's regions are
# us-gov-…) and China's `sns.cn-<…>.amazonaws.com.cn`; nothing else under amazonaws.com (an S3
# bucket's host is `<bucket>.s3.amazonaws.com`, anyone's). A setting replaces it (tests sign
# with their own). Any of them only over https on port 443 (allowed_url).
SNS_CERT_HOSTS = (
    r"^sns\.(?:[a-z]{2}|us-gov)-[a-z]+-[0-9]{1,2}\.amazonaws\.com$"
    r"|^sns\.cn-[a-z]+-[0-9]{1,2}\.amazonaws\.com\.cn$"
)
MAILGUN_MAX_AGE = 15 * 60  # seconds a Mailgun signature stays acceptable
SENDGRID_MAX_AGE = 15 * 60


class Forged(Exception):
    """The event does not prove it comes from the provider; nothing may change."""


class NotAnEvent(ValueError):
    """The body is not the provider's event format (a 400, not a forgery)."""


def _json(body: bytes | str) -> Any:
    try:
        return json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise NotAnEvent(f"not JSON: {exc}") from None


def _text(value: object, limit: int = 500) -> str | None:
    if value is None or value == "":
        return None
    return " ".join(str(value).split())[:limit]


# --- Amazon SES through SNS ------------------------------------------------------------------

NOTIFICATION_FIELDS = ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type")
SUBSCRIPTION_FIELDS = (
    "Message",
    "MessageId",
    "SubscribeURL",
    "Timestamp",
    "Token",
    "TopicArn",
    "Type",
)


@dataclass(frozen=True)
class SnsMessage:
    """A verified SNS message: a notification's findings, or a subscription to confirm."""

    type: str
    topic: str
    findings: tuple[Finding, ...] = ()
    subscribe_url: str | None = None
    message_id: str = ""  # SNS's own MessageId (signed): one per event, kept on a retry
    delivered: tuple[str, ...] = ()  # our Message-IDs SES says it took (ses_deliveries)


def sns_signed_text(message: Mapping[str, Any]) -> bytes:
    """The canonical string SNS signs for this message's type."""
    kind = message.get("Type")
    names = NOTIFICATION_FIELDS if kind == "Notification" else SUBSCRIPTION_FIELDS
    parts = []
    for name in names:
        if name in message and message[name] is not None:
            parts.append(f"{name}\n{message[name]}\n")
    return "".join(parts).encode("utf-8", "surrogatepass")  # one that cannot be UTF-8: Forged


def allowed_url(url: str, hosts: str) -> bool:
    """An https URL on a host the pattern allows (the certificate's, the subscription's), with
    no user or password in it; on Amazon's hosts (the default pattern) only on port 443. A
    setting that replaces the pattern (a private endpoint, the tests' server) names its own."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is not a number, or out of range
        return False
    return (
        parts.scheme == "https"
        and (port in (None, 443) or hosts != SNS_CERT_HOSTS)
        and "@" not in parts.netloc
        and re.fullmatch(hosts, parts.hostname or "") is not None
    )


def verify_sns(
    body: bytes, fetch_cert: Callable[[str], bytes], hosts: str = SNS_CERT_HOSTS
) -> SnsMessage:
    """Check an SNS message's signature with its certificate (PEM from `fetch_cert`, which is
    only called for an allowed https URL); Forged if anything does not hold."""
    message = _json(body)
    if not isinstance(message, dict) or not isinstance(message.get("Type"), str):
        raise NotAnEvent("not an SNS message")
    cert_url = str(message.get("SigningCertURL") or message.get("SigningCertUrl") or "")
    if not allowed_url(cert_url, hosts):
        raise Forged(f"SigningCertURL {cert_url!r} is not an SNS certificate host")
    version = str(message.get("SignatureVersion", ""))
    algorithm: hashes.HashAlgorithm
    if version == "1":
        algorithm = hashes.SHA1()
    elif version == "2":
        algorithm = hashes.SHA256()
    else:
        raise Forged(f"unknown SignatureVersion {version!r}")
    try:
        signature = base64.b64decode(str(message.get("Signature", "")), validate=True)
        cert = x509.load_pem_x509_certificate(fetch_cert(cert_url))
    except (binascii.Error, ValueError) as exc:
        raise Forged(f"unreadable signature or certificate: {exc}") from None
    key = cert.public_key()
    if not isinstance(key, rsa.RSAPublicKey):
        raise Forged("the SNS certificate's key is not RSA")
    try:
        key.verify(signature, sns_signed_text(message), padding.PKCS1v15(), algorithm)
    except InvalidSignature:
        raise Forged("bad SNS signature") from None
    topic = str(message.get("TopicArn", ""))
    if message["Type"] in ("SubscriptionConfirmation", "UnsubscribeConfirmation"):
        url = str(message.get("SubscribeURL", ""))
        if not allowed_url(url, hosts):
            raise Forged(f"SubscribeURL {url!r} is not on an SNS host")
        return SnsMessage(message["Type"], topic, subscribe_url=url)
    if message["Type"] != "Notification":
        raise NotAnEvent(f"SNS message of type {message['Type']!r}")
    inner = message.get("Message", "")
    ses = _json(inner) if isinstance(inner, str) else inner
    message_id = str(message.get("MessageId", ""))
    return SnsMessage(
        "Notification",
        topic,
        findings=ses_findings(ses),
        message_id=message_id,
        delivered=ses_deliveries(ses),
    )


SES_HARD = {"General", "NoEmail", "Suppressed", "OnAccountSuppressionList"}
SES_POLICY = {"MessageTooLarge", "ContentRejected", "AttachmentRejected"}


def _ses_message_id(mail: Mapping[str, Any]) -> str | None:
    common = mail.get("commonHeaders")
    if isinstance(common, dict) and common.get("messageId"):
        return _text(common["messageId"], 998)
    for header in mail.get("headers") or []:
        if isinstance(header, dict) and str(header.get("name", "")).lower() == "message-id":
            return _text(header.get("value"), 998)
    return None


def ses_findings(event: Any) -> tuple[Finding, ...]:
    """An SES notification or event (notificationType / eventType) read into findings."""
    if not isinstance(event, dict):
        raise NotAnEvent("the SES notification is not an object")
    kind = event.get("notificationType") or event.get("eventType")
    given = event.get("mail")
    mail: dict[str, Any] = given if isinstance(given, dict) else {}
    message_id = _ses_message_id(mail)
    if kind == "Bounce":
        bounce = event.get("bounce") or {}
        permanent = bounce.get("bounceType") == "Permanent"
        sub = str(bounce.get("bounceSubType", ""))
        found = []
        for r in bounce.get("bouncedRecipients") or []:
            if not isinstance(r, dict):
                continue
            status = status_in(str(r.get("status") or ""))
            diagnostic = _text(r.get("diagnosticCode"))
            reply = reply_in(diagnostic) if diagnostic else None
            judged = classify(status, reply, diagnostic)
            ses_kind: Kind
            if sub in SES_POLICY or judged == "policy":
                ses_kind = "policy"
            elif permanent and sub in SES_HARD:
                ses_kind = "hard"
            elif sub == "MailboxFull" or not permanent:
                ses_kind = "soft"
            else:
                ses_kind = judged
            why = diagnostic or f"SES {bounce.get('bounceType')}/{sub}"
            address = _text(r.get("emailAddress"), 1000)
            found.append(Finding(address, ses_kind, status, reply, why, message_id))
        return tuple(found)
    if kind == "Complaint":
        complaint = event.get("complaint") or {}
        feedback = complaint.get("complaintFeedbackType")
        if feedback == "not-spam":
            return ()
        why = f"SES complaint{': ' + str(feedback) if feedback else ''}"
        return tuple(
            Finding(_text(r.get("emailAddress"), 1000), "complaint", None, None, why, message_id)
            for r in complaint.get("complainedRecipients") or []
            if isinstance(r, dict)
        )
    return ()  # Delivery, Send, Open, …: not bounces


# Issue 41: the events that say the provider took a message (its 250 to us went), so a job
# left unconfirmed by a crash is confirmed at once. SES: `Send` ("the send request was
# successful and SES will attempt to deliver") and `Delivery` (docs.aws.amazon.com/ses/
# latest/dg/event-publishing-retrieving-sns-contents.html), read by the Message-ID in
# mail.commonHeaders / mail.headers (the original headers: "Include original headers" on).
SES_TOOK = {"Send", "Delivery"}


def ses_deliveries(event: Any) -> tuple[str, ...]:
    """Our Message-ID of an SES Send or Delivery event (one message an event), or ()."""
    if not isinstance(event, dict):
        return ()
    kind = event.get("notificationType") or event.get("eventType")
    mail = event.get("mail")
    if kind not in SES_TOOK or not isinstance(mail, dict):
        return ()
    message_id = _ses_message_id(mail)
    return (message_id,) if message_id else ()


# --- Mailgun ----------------------------------------------------------------------------------


def verify_mailgun(body: bytes, signing_key: str, now: float | None = None) -> Any:
    """A Mailgun webhook's event-data, once its HMAC and its age are checked."""
    payload = _json(body)
    signature = payload.get("signature") if isinstance(payload, dict) else None
    if not isinstance(signature, dict):
        raise NotAnEvent("no signature object")
    timestamp = str(signature.get("timestamp", ""))
    token = str(signature.get("token", ""))
    given = str(signature.get("signature", ""))
    signed = (timestamp + token).encode("utf-8", "surrogatepass")
    want = hmac.new(signing_key.encode(), signed, hashlib.sha256)
    if not hmac.compare_digest(given, want.hexdigest()):
        raise Forged("bad Mailgun signature")
    if not timestamp.isdigit() or abs((now or time.time()) - int(timestamp)) > MAILGUN_MAX_AGE:
        raise Forged("stale Mailgun signature")
    return payload.get("event-data")


def mailgun_findings(event: Any) -> tuple[Finding, ...]:
    """A Mailgun event-data read into findings (failed, complained; the rest is nothing)."""
    if not isinstance(event, dict):
        raise NotAnEvent("event-data is not an object")
    headers = (event.get("message") or {}).get("headers") or {}
    message_id = _text(headers.get("message-id"), 998)
    if message_id and not message_id.startswith("<"):
        message_id = f"<{message_id}>"
    recipient = _text(event.get("recipient"), 1000)
    if event.get("event") == "complained":
        return (Finding(recipient, "complaint", None, None, "Mailgun complaint", message_id),)
    if event.get("event") != "failed":
        return ()
    status = event.get("delivery-status") or {}
    words = " ".join(str(status.get(k) or "") for k in ("message", "description"))
    diagnostic = _text(words) or _text(event.get("reason"))
    code = str(status.get("code") or "")
    reply = code if re.fullmatch(r"[245]\d\d", code) else None
    enhanced = status_in(str(status.get("enhanced-code") or "")) or (
        status_in(diagnostic) if diagnostic else None
    )
    kind = classify(enhanced, reply, diagnostic)
    if event.get("severity") == "temporary" and kind == "hard":
        kind = "soft"  # Mailgun will retry: not a dead address yet
    return (Finding(recipient, kind, enhanced, reply, diagnostic, message_id),)


# Mailgun's `accepted` ("placed in queue") and `delivered` events (documentation.mailgun.com/
# docs/mailgun/user-manual/webhooks/webhook-payloads: event-data.message.headers.message-id,
# without angle brackets).
MAILGUN_TOOK = {"accepted", "delivered"}


def mailgun_deliveries(event: Any) -> tuple[str, ...]:
    """Our Message-ID of a Mailgun accepted or delivered event, or ()."""
    if not isinstance(event, dict) or event.get("event") not in MAILGUN_TOOK:
        return ()
    headers = (event.get("message") or {}).get("headers") or {}
    message_id = _text(headers.get("message-id"), 998)
    return (message_id,) if message_id else ()


# --- SendGrid ---------------------------------------------------------------------------------


def load_sendgrid_key(public_key: str) -> ec.EllipticCurvePublicKey:
    """The verification key as SendGrid shows it (base64 DER), or PEM."""
    text = public_key.strip()
    data = text.encode() if text.startswith("-----") else base64.b64decode(text)
    key = (
        serialization.load_pem_public_key(data)
        if text.startswith("-----")
        else serialization.load_der_public_key(data)
    )
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ValueError("the SendGrid verification key is not an EC key")
    return key


def verify_sendgrid(
    body: bytes,
    signature: str | None,
    timestamp: str | None,
    key: ec.EllipticCurvePublicKey,
    now: float | None = None,
) -> Any:
    """SendGrid's event list, once its ECDSA signature over timestamp + body is checked."""
    if not signature or not timestamp:
        raise Forged("no SendGrid signature headers")
    try:
        raw = base64.b64decode(signature, validate=True)
        key.verify(raw, timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    except (binascii.Error, ValueError, InvalidSignature):
        raise Forged("bad SendGrid signature") from None
    if not timestamp.isdigit() or abs((now or time.time()) - int(timestamp)) > SENDGRID_MAX_AGE:
        raise Forged("stale SendGrid signature")
    return _json(body)


def sendgrid_findings(events: Any) -> tuple[Finding, ...]:
    """SendGrid's events read into findings: bounce, blocked, spamreport."""
    if not isinstance(events, list):
        raise NotAnEvent("SendGrid posts a list of events")
    found = []
    for e in events:
        if not isinstance(e, dict):
            continue
        recipient = _text(e.get("email"), 1000)
        message_id = _text(e.get("smtp-id"), 998)
        kind_of = e.get("event")
        if kind_of == "spamreport":
            why = "SendGrid spam report"
            found.append(Finding(recipient, "complaint", None, None, why, message_id))
            continue
        if kind_of != "bounce":
            continue  # delivered, deferred, dropped (never sent), open, click …
        diagnostic = _text(e.get("reason"))
        status = status_in(str(e.get("status") or "")) or (
            status_in(diagnostic) if diagnostic else None
        )
        reply = reply_in(diagnostic) if diagnostic else None
        kind = "policy" if e.get("type") == "blocked" else classify(status, reply, diagnostic)
        found.append(Finding(recipient, kind, status, reply, diagnostic, message_id))
    return tuple(found)


# SendGrid's `processed` ("received and ready to be delivered") and `delivered` events carry
# the message's Message-ID as `smtp-id` (twilio.com/docs/sendgrid/for-developers/tracking-
# events/event: delivery events).
SENDGRID_TOOK = {"processed", "delivered"}


def sendgrid_deliveries(events: Any) -> tuple[str, ...]:
    """Our Message-IDs of SendGrid's processed and delivered events in one post."""
    if not isinstance(events, list):
        return ()
    found = []
    for e in events:
        if isinstance(e, dict) and e.get("event") in SENDGRID_TOOK:
            message_id = _text(e.get("smtp-id"), 998)
            if message_id:
                found.append(message_id)
    return tuple(found)


# --- Postmark ---------------------------------------------------------------------------------

POSTMARK_HARD = {"HardBounce", "BadEmailAddress", "ManuallyDeactivated", "AddressChange"}
POSTMARK_SOFT = {"SoftBounce", "Transient", "DnsError", "AutoResponder"}
POSTMARK_POLICY = {"Blocked", "SpamNotification", "ContentRelated", "VirusNotification"}
POSTMARK_POLICY |= {"ChallengeVerification", "SMTPApiError", "InboundError", "DMARCPolicy"}
POSTMARK_COMPLAINT = {"SpamComplaint"}


def postmark_findings(body: bytes) -> tuple[Finding, ...]:
    """A Postmark Bounce or SpamComplaint webhook read into findings (auth is the caller's)."""
    event = _json(body)
    if not isinstance(event, dict):
        raise NotAnEvent("a Postmark webhook posts one object")
    record = event.get("RecordType")
    kind_name = str(event.get("Type", ""))
    recipient = _text(event.get("Email"), 1000)
    diagnostic = _text(event.get("Details")) or _text(event.get("Description"))
    if record == "SpamComplaint" or kind_name in POSTMARK_COMPLAINT:
        return (Finding(recipient, "complaint", None, None, "Postmark spam complaint", None),)
    if record != "Bounce":
        return ()
    status = status_in(diagnostic) if diagnostic else None
    reply = reply_in(diagnostic) if diagnostic else None
    kind: Kind
    if kind_name in POSTMARK_HARD:
        kind = "hard"
    elif kind_name in POSTMARK_POLICY:
        kind = "policy"
    elif kind_name in POSTMARK_SOFT:
        if kind_name == "AutoResponder":
            return ()  # an out-of-office reply, not a bounce
        kind = "soft"
    else:
        kind = classify(status, reply, diagnostic)
    return (Finding(recipient, kind, status, reply, diagnostic or f"Postmark {kind_name}", None),)
