"""Read one returned message: which recipients failed, how, and which message of ours it was.

In order, the first that applies decides:
1. an RFC 3464 delivery status notification (a `message/delivery-status` part): each
   per-recipient block with `Action: failed` is a finding, its kind from its Status and
   Diagnostic-Code (bounces.classify); `delayed`, `delivered`, `relayed` and `expanded`
   blocks are notices, not bounces;
2. an RFC 5965 feedback report (`message/feedback-report`): `abuse` and `fraud` are
   complaints about the recipients in Original-Rcpt-To (else the returned message's To);
3. an RFC 3834 auto-reply (out of office, vacation): nothing;
4. the non-standard bounces MTAs still send (qmail, Exim's text, old Exchange, Yahoo, …):
   flufl.bounce's detectors find the permanently failed addresses, and the text beside each
   address gives its status, reply and diagnostic; the temporary ones it finds are delay
   warnings, not bounces.

The returned message's own Message-ID is kept (ours names the broadcast and the subscriber),
so a bounce can be matched even without a VERP return path. Nothing here raises on bad
input: a message that cannot be read is a report with no findings and the reason.
"""

from __future__ import annotations

import email
import email.parser
import email.policy
import email.utils
import re
from dataclasses import dataclass
from email.message import Message

from flufl.bounce import all_failures

from senddock.bounces.classify import Kind, classify, reply_in, status_in

# Only this much of a message is read: a bounce is a few KB, its returned original at most the
# relay's size limit; the listener refuses more before it gets here.
MAX_BYTES = 10 * 1024 * 1024
MAX_DIAGNOSTIC = 500
NO_RECIPIENT = "a delivery status report naming no recipient"
NOTICE_ACTIONS = frozenset({"delayed", "delivered", "relayed", "expanded"})
COMPLAINT_TYPES = frozenset({"abuse", "fraud"})
DAEMONS = frozenset({"mailer-daemon", "postmaster", "mail-daemon", "mailerdaemon"})
AUTO_SUBJECT = re.compile(
    r"out of (the )?office|automatic reply|auto(matic)?[- ]?(reply|response)|vacation|abwesen",
    re.IGNORECASE,
)
BOUNCE_SUBJECT = re.compile(
    r"undeliver|delivery (status|failure|notification)|returned mail|failure notice|bounce"
    r"|rejected",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Finding:
    """One recipient a returned message reports on, and what it says about them."""

    recipient: str | None
    kind: Kind
    status: str | None
    reply: str | None
    diagnostic: str | None
    # The Message-ID of the returned original (ours), when the bounce carries it.
    message_id: str | None = None


@dataclass(frozen=True)
class Report:
    """What one message holds: its findings, or why it holds none."""

    findings: tuple[Finding, ...]
    why_none: str | None = None
    message_id: str | None = None


def _one_line(value: object, limit: int = MAX_DIAGNOSTIC) -> str:
    return " ".join(str(value).split())[:limit]


def _address(field: object) -> str | None:
    """`rfc822; <ada@example.org>` → `ada@example.org`, as found otherwise."""
    if field is None:
        return None
    value = _one_line(field, 1000)
    if ";" in value:
        value = value.split(";", 1)[1]
    value = value.strip().strip("<>").strip()
    return value or None


def _recipient(block: Message) -> str | None:
    """The recipient a DSN block is about: the address we gave (Original-Recipient) when it is
    an Internet address, else where the relay last tried (Final-Recipient)."""
    for field in ("Original-Recipient", "Final-Recipient"):
        value = block.get(field)
        if value is None:
            continue
        kind = str(value).split(";", 1)[0].strip().lower() if ";" in str(value) else "rfc822"
        address = _address(value)
        if address and "@" in address and kind in ("rfc822", "utf-8"):
            return address
    return _address(block.get("Final-Recipient") or block.get("Original-Recipient"))


def _blocks(part: Message) -> list[Message]:
    """The header blocks of a delivery-status or feedback-report part."""
    payload = part.get_payload()
    if not isinstance(payload, list):
        raw = part.get_payload(decode=True)
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(payload)
        return _split_blocks(text)
    blocks = []
    for block in payload:
        if not isinstance(block, Message):
            continue
        blocks.append(block)
        # message/global-delivery-status (RFC 6533, what Postfix sends for an SMTPUTF8
        # message) is parsed as one message: its first block's headers, the rest as a body.
        # Read as octets: its recipients may be UTF-8 (`utf-8; zoë@bücher.example`), which
        # the text payload would show as U+FFFD.
        rest = block.get_payload(decode=True)
        if isinstance(rest, bytes) and rest.strip():
            blocks.extend(_split_blocks(rest.decode("utf-8", "replace")))
    return blocks


def _split_blocks(text: str) -> list[Message]:
    parser = email.parser.HeaderParser()
    return [parser.parsestr(b.strip() + "\n") for b in re.split(r"\r?\n\s*\r?\n", text) if b]


def _original_headers(msg: Message) -> Message | None:
    """The headers of the message returned inside a report, if it carries them."""
    for part in msg.walk():
        kind = part.get_content_type()
        if kind in ("message/rfc822", "message/global"):
            inner = part.get_payload()
            if isinstance(inner, list) and inner and isinstance(inner[0], Message):
                return inner[0]
        elif kind in ("text/rfc822-headers", "text/global-headers"):
            raw = part.get_payload(decode=True)
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else ""
            return email.parser.HeaderParser().parsestr(text)
    return None


def _message_id(msg: Message) -> str | None:
    original = _original_headers(msg)
    if original is None or original.get("Message-ID") is None:
        return None
    return _one_line(original["Message-ID"], 998)


def _part(msg: Message, content_type: str) -> Message | None:
    return next((p for p in msg.walk() if p.get_content_type() == content_type), None)


def _dsn(part: Message, message_id: str | None) -> Report:
    findings = []
    notices = []
    for block in _blocks(part)[1:] or _blocks(part):
        recipient = _recipient(block)
        action = _one_line(block.get("Action", "")).lower()
        status_field = block.get("Status")
        status = status_in(str(status_field)) if status_field else None
        diag_field = block.get("Diagnostic-Code")
        diagnostic = None
        if diag_field is not None:
            diagnostic = _one_line(diag_field)
            if ";" in diagnostic[:20]:
                diagnostic = diagnostic.split(";", 1)[1].strip()
        if recipient is None and not action:
            continue  # the per-message block of a report the parser did not split
        if action in NOTICE_ACTIONS or (not action and not (status or "").startswith("5")):
            notices.append(action or "notice")
            continue
        reply = reply_in(diagnostic) if diagnostic else None
        said = status_in(diagnostic) if diagnostic else None
        # "Status: 5.0.0" with "550 5.7.1 blocked" in the diagnostic: the remote's is precise.
        if said and (status is None or status.endswith(".0.0")):
            status = said
        kind = classify(status, reply, diagnostic)
        finding = Finding(recipient, kind, status, reply, diagnostic, message_id)
        if finding not in findings:
            findings.append(finding)
    if findings:
        return Report(tuple(findings), message_id=message_id)
    if not notices:
        return Report((), NO_RECIPIENT)
    why = f"a delivery status notice ({', '.join(sorted(set(notices)))}), not a bounce"
    return Report((), why)


def _feedback(part: Message, msg: Message, message_id: str | None) -> Report:
    blocks = _blocks(part)
    fields = blocks[0] if blocks else Message()
    kind = _one_line(fields.get("Feedback-Type", "")).lower()
    if kind not in COMPLAINT_TYPES:
        return Report((), f"a feedback report of type {kind or 'unknown'!r}, not a complaint")
    recipients = [_address(v) for v in fields.get_all("Original-Rcpt-To") or []]
    if not recipients:
        original = _original_headers(msg)
        to = original.get_all("To") if original is not None else None
        recipients = [a for _, a in email.utils.getaddresses([str(v) for v in to or []]) if a]
    diagnostic = f"feedback report: {kind}"
    found = tuple(
        Finding(r, "complaint", None, None, diagnostic, message_id) for r in recipients or [None]
    )
    return Report(found, message_id=message_id)


def _is_auto_reply(msg: Message) -> bool:
    auto = _one_line(msg.get("Auto-Submitted", "no")).lower()
    flagged = (
        auto.startswith("auto-replied")
        or msg.get("X-Autoreply") is not None
        or msg.get("X-Autorespond") is not None
        or _one_line(msg.get("Precedence", "")).lower() == "auto_reply"
        or AUTO_SUBJECT.search(_one_line(msg.get("Subject", ""))) is not None
    )
    sender = email.utils.parseaddr(str(msg.get("From", "")))[1].split("@", 1)[0].lower()
    subject = _one_line(msg.get("Subject", ""))
    return flagged and sender not in DAEMONS and not BOUNCE_SUBJECT.search(subject)


def _text(msg: Message) -> str:
    texts = []
    for part in msg.walk():
        if part.get_content_maintype() == "text":
            raw = part.get_payload(decode=True)
            if isinstance(raw, bytes):
                texts.append(raw.decode(part.get_content_charset() or "utf-8", "replace"))
    return "\n".join(texts)


def _beside(text: str, address: str) -> str:
    """The lines that follow an address in a bounce's text: its reason, in every format seen."""
    lines = text.splitlines()
    lowered = address.lower()
    for i, line in enumerate(lines):
        if lowered in line.lower():
            return _one_line(" ".join(lines[i : i + 4]))
    return ""


def _non_standard(msg: Message, message_id: str | None) -> Report:
    _temporary, permanent = all_failures(msg)
    if not permanent:
        return Report((), "no bounce found" if not _temporary else "a delay warning, not a bounce")
    text = _text(msg)
    findings = []
    for raw in sorted(permanent):
        recipient = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        diagnostic = _beside(text, recipient) or None
        status = status_in(diagnostic) if diagnostic else None
        reply = reply_in(diagnostic) if diagnostic else None
        kind = classify(status, reply, diagnostic)
        findings.append(Finding(recipient, kind, status, reply, diagnostic, message_id))
    return Report(tuple(findings), message_id=message_id)


def parse_message(msg: Message) -> Report:
    """The report of one parsed message (see the module for the order of the rules)."""
    message_id = _message_id(msg)
    dsn = _part(msg, "message/delivery-status") or _part(msg, "message/global-delivery-status")
    dsn_report = None
    if dsn is not None:
        dsn_report = _dsn(dsn, message_id)
        if dsn_report.findings or dsn_report.why_none != NO_RECIPIENT:
            return dsn_report
        # A report whose blocks name nobody readable (a broken or X.400 one): the detectors
        # below read its text.
    feedback = _part(msg, "message/feedback-report")
    if feedback is not None:
        return _feedback(feedback, msg, message_id)
    if _is_auto_reply(msg):
        return Report((), "an automatic reply (RFC 3834), not a bounce")
    report = _non_standard(msg, message_id)
    return report if report.findings or dsn_report is None else dsn_report


def records(file: str, report: Report) -> list[dict[str, str | None]]:
    """`senddock bounces parse`'s lines for one file: one per finding, or one saying none."""
    keys = ("recipient", "kind", "status", "reply", "diagnostic")
    if not report.findings:
        return [
            {"file": file, **dict.fromkeys(keys), "kind": "none", "diagnostic": report.why_none}
        ]
    return [
        {"file": file, **{k: getattr(f, k) for k in keys}}  # recipients as found
        for f in report.findings
    ]


def read_capped(path: str) -> bytes:
    """A file's first MAX_BYTES + 1 bytes: enough to know it is too big, no more in memory."""
    with open(path, "rb") as f:
        return f.read(MAX_BYTES + 1)


def parse(raw: bytes) -> Report:
    """The report of one message's bytes; never raises (a reason instead of findings)."""
    if len(raw) > MAX_BYTES:
        return Report((), f"larger than {MAX_BYTES // (1024 * 1024)} MB: not read")
    try:
        msg = email.message_from_bytes(raw, policy=email.policy.compat32)
        return parse_message(msg)
    except Exception as exc:  # any malformed message: kept for a person to look at
        return Report((), f"cannot be parsed: {type(exc).__name__}: {_one_line(exc, 200)}")
