"""Provider events: a signature that does not hold changes nothing; a good one reads right.

Keys and certificates are made here and sign as the providers do (payload shapes from their
documentation: SES notifications through SNS, Mailgun's webhooks, SendGrid's event webhook,
Postmark's bounce and spam-complaint webhooks).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import time
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import NameOID

from senddock.bounces import providers
from senddock.bounces.providers import Forged, NotAnEvent

CERT_URL = "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-abc.pem"
OUR_ID = "<sd.42.7.Ab3x@news.example.org>"


def _certificate() -> tuple[rsa.RSAPrivateKey, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.amazonaws.com")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return key, cert.public_bytes(serialization.Encoding.PEM)


KEY, PEM = _certificate()
FETCHED: list[str] = []


def fetch(url: str) -> bytes:
    FETCHED.append(url)
    return PEM


def sns(message: dict[str, Any], version: str = "2", key: rsa.RSAPrivateKey = KEY) -> bytes:
    signed = {**message, "SignatureVersion": version, "SigningCertURL": CERT_URL}
    algorithm = hashes.SHA1() if version == "1" else hashes.SHA256()
    text = providers.sns_signed_text(signed)
    signed["Signature"] = base64.b64encode(key.sign(text, padding.PKCS1v15(), algorithm)).decode()
    return json.dumps(signed).encode()


def notification(ses: dict[str, Any]) -> dict[str, Any]:
    return {
        "Type": "Notification",
        "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
        "TopicArn": "arn:aws:sns:eu-west-1:123456789012:ses-bounces",
        "Message": json.dumps(ses),
        "Timestamp": "2026-12-01T09:00:00.000Z",
    }


SES_BOUNCE = {
    "notificationType": "Bounce",
    "bounce": {
        "bounceType": "Permanent",
        "bounceSubType": "General",
        "bouncedRecipients": [
            {
                "emailAddress": "ada@example.com",
                "action": "failed",
                "status": "5.1.1",
                "diagnosticCode": "smtp; 550 5.1.1 user unknown",
            }
        ],
    },
    "mail": {"commonHeaders": {"messageId": OUR_ID}, "source": "news@example.org"},
}
SES_COMPLAINT = {
    "notificationType": "Complaint",
    "complaint": {
        "complainedRecipients": [{"emailAddress": "bob@example.com"}],
        "complaintFeedbackType": "abuse",
    },
    "mail": {"headers": [{"name": "Message-ID", "value": OUR_ID}]},
}


@pytest.mark.parametrize("version", ["1", "2"])
def test_an_ses_bounce_through_sns_is_verified_and_read(version: str) -> None:
    got = providers.verify_sns(sns(notification(SES_BOUNCE), version), fetch)
    [f] = got.findings
    assert (f.recipient, f.kind, f.status, f.reply, f.message_id) == (
        "ada@example.com",
        "hard",
        "5.1.1",
        "550",
        OUR_ID,
    )
    [c] = providers.verify_sns(sns(notification(SES_COMPLAINT)), fetch).findings
    assert (c.recipient, c.kind, c.message_id) == ("bob@example.com", "complaint", OUR_ID)


@pytest.mark.parametrize(
    ("sub", "kind"),
    [("MailboxFull", "soft"), ("ContentRejected", "policy"), ("General", "soft")],
)
def test_an_ses_transient_bounce_suppresses_nobody_at_once(sub: str, kind: str) -> None:
    event = json.loads(json.dumps(SES_BOUNCE))
    event["bounce"] |= {"bounceType": "Transient", "bounceSubType": sub}
    event["bounce"]["bouncedRecipients"][0] |= {"status": "4.0.0", "diagnosticCode": None}
    [f] = providers.ses_findings(event)
    assert f.kind == kind


def test_an_sns_message_altered_or_signed_by_another_key_is_forged() -> None:
    good = json.loads(sns(notification(SES_BOUNCE)))
    altered = {**good, "Message": good["Message"].replace("ada@", "eve@")}
    other, _ = _certificate()
    for body in (
        json.dumps(altered).encode(),
        sns(notification(SES_BOUNCE), key=other),
        json.dumps({**good, "SignatureVersion": "3"}).encode(),
        json.dumps({**good, "Signature": "not base64!"}).encode(),
    ):
        with pytest.raises(Forged):
            providers.verify_sns(body, fetch)


def test_a_certificate_is_fetched_only_from_an_sns_host_over_https() -> None:
    FETCHED.clear()
    good = json.loads(sns(notification(SES_BOUNCE)))
    for url in (
        "http://sns.eu-west-1.amazonaws.com/cert.pem",
        "https://sns.eu-west-1.amazonaws.com.evil.example/cert.pem",
        "https://evil.example/sns.eu-west-1.amazonaws.com/cert.pem",
        "https://s3.amazonaws.com/cert.pem",
    ):
        with pytest.raises(Forged, match="not an SNS certificate host"):
            providers.verify_sns(json.dumps({**good, "SigningCertURL": url}).encode(), fetch)
    assert FETCHED == []
    # A setting names other hosts (how the tests of the web layer sign with their own).
    local = {**good, "SigningCertURL": "https://127.0.0.1:8443/cert.pem"}
    got = providers.verify_sns(json.dumps(local).encode(), fetch, hosts=r"127\.0\.0\.1")
    assert got.findings and FETCHED == ["https://127.0.0.1:8443/cert.pem"]


def test_a_subscription_confirmation_gives_the_url_to_visit() -> None:
    message = {
        "Type": "SubscriptionConfirmation",
        "MessageId": "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
        "Token": "2336412f37",
        "TopicArn": "arn:aws:sns:eu-west-1:123456789012:ses-bounces",
        "Message": "You have chosen to subscribe to the topic …",
        "SubscribeURL": "https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription&T=1",
        "Timestamp": "2026-12-01T09:00:00.000Z",
    }
    got = providers.verify_sns(sns(message), fetch)
    assert (got.type, got.subscribe_url) == ("SubscriptionConfirmation", message["SubscribeURL"])
    evil = {**message, "SubscribeURL": "https://evil.example/?Action=ConfirmSubscription"}
    with pytest.raises(Forged, match="SubscribeURL"):
        providers.verify_sns(sns(evil), fetch)


MAILGUN_KEY = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0"


def mailgun(event: dict[str, Any], key: str = MAILGUN_KEY, age: float = 0) -> bytes:
    timestamp = str(int(time.time() - age))
    token = "a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0"
    mac = hmac.new(key.encode(), (timestamp + token).encode(), hashlib.sha256).hexdigest()
    signature = {"timestamp": timestamp, "token": token, "signature": mac}
    return json.dumps({"signature": signature, "event-data": event}).encode()


MAILGUN_FAILED = {
    "event": "failed",
    "severity": "permanent",
    "recipient": "carol@example.com",
    "reason": "bounce",
    "delivery-status": {
        "code": 550,
        "message": "5.1.1 The email account that you tried to reach does not exist.",
        "description": "",
    },
    "message": {"headers": {"message-id": "sd.42.7.Ab3x@news.example.org"}},
}


def test_a_mailgun_event_is_verified_and_read() -> None:
    event = providers.verify_mailgun(mailgun(MAILGUN_FAILED), MAILGUN_KEY)
    [f] = providers.mailgun_findings(event)
    assert (f.recipient, f.kind, f.status, f.reply, f.message_id) == (
        "carol@example.com",
        "hard",
        "5.1.1",
        "550",
        OUR_ID,
    )
    complained = {"event": "complained", "recipient": "dan@example.com", "message": {}}
    [c] = providers.mailgun_findings(providers.verify_mailgun(mailgun(complained), MAILGUN_KEY))
    assert (c.recipient, c.kind) == ("dan@example.com", "complaint")
    temporary = {**MAILGUN_FAILED, "severity": "temporary"}
    [t] = providers.mailgun_findings(providers.verify_mailgun(mailgun(temporary), MAILGUN_KEY))
    assert t.kind == "soft"
    delivered = {"event": "delivered", "recipient": "x@example.com"}
    assert providers.mailgun_findings(delivered) == ()


def test_a_mailgun_event_with_a_bad_or_old_signature_is_forged() -> None:
    with pytest.raises(Forged, match="bad"):
        providers.verify_mailgun(mailgun(MAILGUN_FAILED, key="another key"), MAILGUN_KEY)
    with pytest.raises(Forged, match="stale"):
        providers.verify_mailgun(mailgun(MAILGUN_FAILED, age=3600), MAILGUN_KEY)
    with pytest.raises(NotAnEvent):
        providers.verify_mailgun(b"{not json", MAILGUN_KEY)


SENDGRID = ec.generate_private_key(ec.SECP256R1())
SENDGRID_PUBLIC = base64.b64encode(
    SENDGRID.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
).decode()


def sendgrid(
    events: list[dict[str, Any]], key: ec.EllipticCurvePrivateKey = SENDGRID
) -> tuple[bytes, str, str]:
    body = json.dumps(events).encode()
    timestamp = str(int(time.time()))
    signature = key.sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    return body, base64.b64encode(signature).decode(), timestamp


SENDGRID_EVENTS: list[dict[str, Any]] = [
    {
        "email": "erin@example.com",
        "event": "bounce",
        "type": "bounce",
        "status": "5.1.1",
        "reason": "550 5.1.1 The email account that you tried to reach does not exist.",
        "smtp-id": OUR_ID,
        "timestamp": 1764579600,
    },
    {"email": "fay@example.com", "event": "bounce", "type": "blocked", "status": "5.7.1",
     "reason": "550 5.7.1 blocked by policy", "smtp-id": OUR_ID},
    {"email": "gus@example.com", "event": "spamreport", "smtp-id": OUR_ID},
    {"email": "hal@example.com", "event": "deferred", "response": "451 try later"},
    {"email": "ivy@example.com", "event": "delivered"},
]  # fmt: skip


def test_sendgrid_events_are_verified_and_read() -> None:
    key = providers.load_sendgrid_key(SENDGRID_PUBLIC)
    body, signature, timestamp = sendgrid(SENDGRID_EVENTS)
    events = providers.verify_sendgrid(body, signature, timestamp, key)
    got = [(f.recipient, f.kind, f.status) for f in providers.sendgrid_findings(events)]
    assert got == [
        ("erin@example.com", "hard", "5.1.1"),
        ("fay@example.com", "policy", "5.7.1"),
        ("gus@example.com", "complaint", None),
    ]


def test_sendgrid_events_signed_otherwise_are_forged() -> None:
    key = providers.load_sendgrid_key(SENDGRID_PUBLIC)
    body, signature, timestamp = sendgrid(SENDGRID_EVENTS)
    _, other, _ = sendgrid(SENDGRID_EVENTS, key=ec.generate_private_key(ec.SECP256R1()))
    cases: list[tuple[bytes, str | None, str]] = [
        (body.replace(b"erin@", b"eve@@"), signature, timestamp),
        (body, other, timestamp),
        (body, signature, str(int(timestamp) + 1)),
        (body, None, timestamp),
        (body, "###", timestamp),
    ]
    for args in cases:
        with pytest.raises(Forged):
            providers.verify_sendgrid(*args, key)


@pytest.mark.parametrize(
    ("event", "want"),
    [
        ({"RecordType": "Bounce", "Type": "HardBounce", "Email": "jo@example.com",
          "Details": "smtp;550 5.1.1 The email account does not exist."},
         [("jo@example.com", "hard", "5.1.1")]),
        ({"RecordType": "Bounce", "Type": "SoftBounce", "Email": "kim@example.com",
          "Details": "452 4.2.2 mailbox full"}, [("kim@example.com", "soft", "4.2.2")]),
        ({"RecordType": "Bounce", "Type": "Blocked", "Email": "lee@example.com",
          "Details": "554 5.7.1 blocked"}, [("lee@example.com", "policy", "5.7.1")]),
        ({"RecordType": "SpamComplaint", "Type": "SpamComplaint", "Email": "max@example.com"},
         [("max@example.com", "complaint", None)]),
        ({"RecordType": "Bounce", "Type": "AutoResponder", "Email": "nia@example.com"}, []),
        ({"RecordType": "Delivery", "Email": "oli@example.com"}, []),
    ],
)  # fmt: skip
def test_postmark_webhooks_are_read(event: dict[str, Any], want: list[Any]) -> None:
    got = providers.postmark_findings(json.dumps(event).encode())
    assert [(f.recipient, f.kind, f.status) for f in got] == want
