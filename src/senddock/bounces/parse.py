"""Read one returned message: which recipients failed, why, and which message of ours it was.

In order, the first that applies decides:
1. an RFC 3464 delivery status notification (a `message/delivery-status` part): each
   per-recipient block with `Action: failed` is a finding, its reason and kind from its
   Status and Diagnostic-Code (bounces.classify), or from the bounce's own words beside its
   recipient when the block names no reason; `delayed`, `delivered`, `relayed` and
   `expanded` blocks are notices, not bounces; a block whose fields run into the next
   recipient's (no blank line between them, as AOL sends) is split;
2. an RFC 5965 feedback report (`message/feedback-report`): `abuse`, `fraud` and `opt-out`
   are complaints (reason `feedback`) about the recipients in Original-Rcpt-To (else the
   returned message's To); so are Microsoft's JMRP reports and Apple Mail's unsubscribe
   requests, in their own formats;
3. an RFC 3834 auto-reply (out of office, vacation): nothing;
4. the non-standard bounces MTAs still send (qmail, Exim's text, old Exchange, Yahoo, …):
   an SES notification mailed as JSON, DSN fields written as text (a forwarded report),
   flufl.bounce's detectors' permanently failed addresses, and, in mail that looks like a
   bounce, the addresses of its own text (up to the message it returns; not ours, not a
   Message-ID, not one its words name as the sender) that have a status or a reason beside
   them; a delay warning is not a bounce.

The returned message's own Message-ID is kept (ours names the broadcast and the subscriber),
so a bounce can be matched even without a VERP return path. Nothing here raises on bad
input: a message that cannot be read is a report with no findings and the reason.
"""

from __future__ import annotations

import email
import email.parser
import email.policy
import email.utils
import html
import itertools
import json
import re
from dataclasses import dataclass
from email.message import Message

from flufl.bounce import all_failures

from senddock.bounces.classify import (
    reply_in,
    status_in,
    words_reason,
)
from senddock.bounces.finding import Finding
from senddock.bounces.providers import NotAnEvent, ses_findings

# Only this much of a message is read: a bounce is a few KB, its returned original at most the
# relay's size limit; the listener refuses more before it gets here.
MAX_BYTES = 10 * 1024 * 1024
MAX_DIAGNOSTIC = 500
NO_RECIPIENT = "a delivery status report naming no recipient"
RECIPIENT_FIELDS = frozenset({"final-recipient", "original-recipient", "action", "status"})
NOTICE_ACTIONS = frozenset({"delayed", "delivered", "relayed", "expanded"})
# RFC 5965's abuse and fraud, and opt-out: the recipient asked to hear no more (RFC 6650).
COMPLAINT_TYPES = frozenset({"abuse", "fraud", "opt-out"})
DAEMONS = frozenset({"mailer-daemon", "postmaster", "mail-daemon", "mailerdaemon"})
AUTO_SUBJECT = re.compile(
    r"out of (the )?office|automatic reply|auto(matic)?[- ]?(reply|response)|vacation|abwesen",
    re.IGNORECASE,
)
DELAY_SUBJECT = re.compile(
    r"delayed mail|delivery (status notification \(delay|delay)|warning: (could not send|message"
    r" .* delayed)|still being retried|delivery delayed|not yet been delivered",
    re.IGNORECASE,
)
# Where a bounce's own text ends and the message it returns begins, in the MTAs' words.
RETURNED = re.compile(
    r"^\W*(original message|returned message|unsent message|(a )?copy of (the|your) (original )?"
    r"message|below (this line )?is a copy|message headers follow|original message headers"
    r"|the (header|headers) of the original|undelivered message|original headers"
    r"|-+ ?(original|returned|unsent|undelivered) (message|mail)|this is a copy of the message)"
    r"|^(received|return-path|dkim-signature): ",
    re.IGNORECASE,
)
DSN_FIELD = re.compile(r"(?im)^(reporting-mta|final-recipient|original-recipient):")
# An address in a bounce's words; it starts after an `=` (X.400's `SMTP=a@b.example`).
ADDRESS = re.compile(r"(?<![\w.@/+-])[\w.+/'-]{1,64}@[\w-]{1,63}(\.[\w-]{1,63})+")
# An address the words name as the sender ("not accepting mail from list@…"), not a recipient.
SENDER_BEFORE = re.compile(r"\bfrom:?\s*<?$", re.IGNORECASE)
MAX_FINDINGS = 100
# How much of a bounce's own text is read, line by line and in all: enough for any real
# report (the longest of Sisimai's 632 is far shorter), bounded for a hostile one.
MAX_LINE = 1000
MAX_TEXT = 200_000
MAX_CANDIDATES = 300
# Lines of a bounce's text whose addresses are never a failed recipient: ours, or a Message-ID.
NOT_A_RECIPIENT = re.compile(
    r"^\W*(message-id|in-reply-to|references|from|sender|reply-to|return-path|mail from"
    r"|envelope-from|x-[\w-]+)\s*:",
    re.IGNORECASE,
)
DAEMON = re.compile(r"mailer[-_ ]?daemon|post_?master|mail ?delivery|mdaemon", re.IGNORECASE)
BOUNCE_SUBJECT = re.compile(
    r"undeliver|delivery (status|failure|failed|notification|problem)|returned mail"
    r"|failure notice|bounce|rejected|could not be delivered|not delivered|error sending"
    r"|delivery has failed|mail (delivery )?failed|returned to sender",
    re.IGNORECASE,
)


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
        blocks.extend(_per_recipient(block))
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
    blocks = [parser.parsestr(b.strip() + "\n") for b in re.split(r"\r?\n\s*\r?\n", text) if b]
    return [one for block in blocks for one in _per_recipient(block)]


def _per_recipient(block: Message) -> list[Message]:
    """A block split where a recipient's fields start again: some MTAs (AOL's) leave out the
    blank line between recipients, which would read as one block with each field twice."""
    parts: list[list[tuple[str, str]]] = [[]]
    for name, value in block.items():
        seen = {n.lower() for n, _ in parts[-1]}
        if name.lower() in RECIPIENT_FIELDS and name.lower() in seen:
            parts.append([])
        parts[-1].append((name, value))
    if len(parts) == 1:
        return [block]
    split = []
    for fields in parts:
        one = Message()
        for name, value in fields:
            one[name] = value
        split.append(one)
    return split


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


def _dsn(
    blocks: list[Message],
    message_id: str | None,
    text: str = "",
    ours: frozenset[str] = frozenset(),
) -> Report:
    """The findings of a delivery status report's blocks; `text`, the bounce's own words,
    explains a recipient whose block names no reason (no Diagnostic-Code, `Status: 5.0.0`),
    and names the recipient of one whose address is unreadable (`@host`) when it names only
    one address that is not `ours`."""
    named = {a.group(0).strip(".").lower() for a in ADDRESS.finditer(text)} - ours
    findings = []
    notices = []
    for block in blocks[1:] or blocks:
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
        if (recipient is None or recipient.startswith("@")) and len(named) == 1:
            recipient = next(iter(named))
        if action in NOTICE_ACTIONS or (not action and not (status or "").startswith("5")):
            notices.append(action or "notice")
            continue
        reply = reply_in(diagnostic) if diagnostic else None
        said = status_in(diagnostic) if diagnostic else None
        # "Status: 5.0.0" with "550 5.7.1 blocked" in the diagnostic: the remote's is precise.
        if said and (status is None or status.endswith(".0.0")):
            status = said
        finding = Finding.judged(recipient, status, reply, diagnostic, message_id)
        if finding.reason == "undefined" and recipient and text:
            said_beside = _context(text.splitlines(), recipient)
            if said_beside:
                diagnostic = _one_line(f"{diagnostic or ''} {said_beside}")
                if status is None or status.endswith(".0.0"):
                    status = status_in(said_beside) or status
                reply = reply or reply_in(said_beside)
                finding = Finding.judged(recipient, status, reply, diagnostic, message_id)
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
        Finding(r, "complaint", None, None, diagnostic, message_id, "feedback")
        for r in recipients or [None]
    )
    return Report(found, message_id=message_id)


def _provider_complaint(msg: Message, message_id: str | None) -> Report | None:
    """Complaints sent in a provider's own format, not RFC 5965: Microsoft's JMRP (the
    reported message attached, its recipient in X-HmXmrOriginalRecipient) and Apple Mail's
    unsubscribe request (X-Apple-Unsubscribe, from the recipient to our List-Unsubscribe)."""
    original = _original_headers(msg)
    reported = original.get("X-HmXmrOriginalRecipient") if original is not None else None
    if reported is not None:
        why = "a complaint (Microsoft JMRP)"
        recipient = _address(reported)
    elif _one_line(msg.get("X-Apple-Unsubscribe", "")).lower() == "true":
        why = "an unsubscribe request (Apple Mail)"
        recipient = email.utils.parseaddr(_one_line(msg.get("From", ""), 1000))[1] or None
    else:
        return None
    finding = Finding(recipient, "complaint", None, None, why, message_id, "feedback")
    return Report((finding,), message_id=message_id)


def _looks_like_a_bounce(msg: Message) -> bool:
    """Sent by a mail system about a failure: the null return path (RFC 5321 4.5.5), a
    daemon's From, a report's content type or a bounce's subject."""
    return (
        _one_line(msg.get("Return-Path", "x")).strip("<> ") == ""
        or DAEMON.search(_one_line(msg.get("From", ""), 1000)) is not None
        or msg.get_content_type() == "multipart/report"
        or BOUNCE_SUBJECT.search(_one_line(msg.get("Subject", ""))) is not None
    )


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


def _decoded(part: Message) -> str:
    raw = part.get_payload(decode=True)
    if not isinstance(raw, bytes):
        return ""
    charset = part.get_content_charset() or ("iso-2022-jp" if b"\x1b$B" in raw else "utf-8")
    try:
        text = raw.decode(charset, "replace")
    except LookupError:  # a charset Python does not know
        text = raw.decode("utf-8", "replace")
    if part.get_content_subtype() == "html":
        text = html.unescape(re.sub(r"(?is)<(style|script).*?</\1>|<[^>]*>", " ", text))
    return text


def _own_text(part: Message) -> str:
    """The words of the bounce itself: its text parts, not those of the message it returns."""
    payload = part.get_payload()
    if part.get_content_maintype() == "multipart" and isinstance(payload, str):
        return payload  # a multipart whose boundary is not where it says: read it whole
    if part.is_multipart():
        subs = payload if isinstance(payload, list) else []
        return "\n".join(
            _own_text(sub)
            for sub in subs
            if isinstance(sub, Message) and sub.get_content_maintype() != "message"
        )
    return _decoded(part) if part.get_content_maintype() == "text" else ""


def _cut(text: str) -> str:
    """A bounce's text up to the message it returns, one level of quoting (`> `) removed."""
    lines = text.splitlines()
    quoted = [ln for ln in lines if ln.strip()]
    if quoted and sum(ln.startswith(">") for ln in quoted) * 2 > len(quoted):
        lines = [ln[2:] if ln.startswith("> ") else ln[1:] if ln.startswith(">") else ln
                 for ln in lines]  # fmt: skip
    kept = []
    size = 0
    for line in lines:
        if RETURNED.search(line[:MAX_LINE]) or size > MAX_TEXT:
            break
        kept.append(line[:MAX_LINE])  # the words of a reply are short; a hostile line is not
        size += len(kept[-1]) + 1
    return "\n".join(kept)


def _text_dsn(text: str) -> list[Message]:
    """The RFC 3464 fields written into a bounce's text (a forwarded or mis-built report)."""
    found = DSN_FIELD.search(text)
    if found is None or not re.search(r"(?im)^action:", text):
        return []
    return _split_blocks(text[found.start() :])


def _context(lines: list[str], address: str) -> str | None:
    """What a bounce's text says beside an address: the line naming it when that line holds a
    status or reason, with its indented continuation; else the lines that follow it (or, when
    they say nothing, those before it)."""
    lowered = address.lower()
    at = [i for i, line in enumerate(lines) if lowered in line.lower()]
    for i in at:
        following = lines[i + 1 : i + 6]
        own = [lines[i], *itertools.takewhile(lambda ln: ln[:1] in " \t" and ln.strip(), following)]
        said = " ".join(own)
        if status_in(said) or words_reason(said.replace(address, " ")):
            return _one_line(said)
    for i in at:
        after: list[str] = []
        for line in lines[i + 1 : i + 8]:
            if ADDRESS.search(line) and lowered not in line.lower() and after:
                break
            if line.strip():
                after.append(line)
            if len(after) == 4:
                break
        said = " ".join(after)
        if status_in(said) or words_reason(said):
            return _one_line(lines[i] + " " + said)
        before = " ".join(ln for ln in lines[max(0, i - 3) : i] if ln.strip())
        if not ADDRESS.search(before) and (status_in(before) or words_reason(before)):
            return _one_line(before + " " + lines[i])
    return _one_line(" ".join(lines[at[0] : at[0] + 4])) if at else None


def _occurrences(text: str, address: str) -> list[re.Match[str]]:
    return list(re.finditer(re.escape(address), text, re.IGNORECASE))


def _ours(msg: Message) -> frozenset[str]:
    """Addresses in a bounce that are not a failed recipient: who sent it and to whom."""
    fields = ("From", "To", "Sender", "Reply-To", "Return-Path")
    values = [str(v) for f in fields for v in msg.get_all(f) or []]
    original = _original_headers(msg)
    if original is not None:
        values += [str(v) for v in original.get_all("From") or []]
        values += [str(v) for v in original.get_all("Sender") or []]
    known = {a.lower() for _, a in email.utils.getaddresses(values) if "@" in a}
    message_id = _message_id(msg)
    if message_id:
        known.add(message_id.strip("<>").lower())
    return frozenset(known)


def _provider_json(text: str) -> tuple[Finding, ...]:
    """Amazon SES's notification mailed as JSON (an SNS e-mail subscription)."""
    try:
        # Sendmail breaks a line longer than 990 octets with "!", newline, space: undone.
        unbroken = re.sub(r"!\r?\n ", "", text.strip())
        event, _end = json.JSONDecoder(strict=False).raw_decode(unbroken)  # a footer may follow
        if isinstance(event, dict) and isinstance(event.get("Message"), str):
            event = json.loads(event["Message"])
        return ses_findings(event)
    except (ValueError, NotAnEvent):
        return ()


def _non_standard(msg: Message, message_id: str | None) -> Report:
    """Bounces in no standard format: flufl.bounce's detectors, then the failed recipients'
    addresses and reasons read from the bounce's own text (before the returned message)."""
    temporary, permanent = all_failures(msg)
    own = _own_text(msg)
    text = _cut(own)
    if own.lstrip().startswith("{") and "notificationType" in own:
        found = _provider_json(own)  # whole: its JSON is one long line
        if found:
            return Report(found, message_id=message_id)
    blocks = _text_dsn(text)
    if blocks:
        report = _dsn(blocks, message_id, text, _ours(msg))
        if report.findings:
            return report
    subject = _one_line(msg.get("Subject", ""))
    if (temporary and not permanent) or DELAY_SUBJECT.search(subject):
        return Report((), "a delay warning, not a bounce")
    lines = text.splitlines()
    ours = _ours(msg)
    findings: list[Finding] = []
    for raw in sorted(permanent):
        recipient = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        if not ADDRESS.fullmatch(recipient):
            continue  # a detector's guess that is no address (a line of JSON, a phrase)
        diagnostic = _context(lines, recipient)
        status = status_in(diagnostic) if diagnostic else None
        reply = reply_in(diagnostic) if diagnostic else None
        findings.append(Finding.judged(recipient, status, reply, diagnostic, message_id))
    named = {f.recipient.lower() for f in findings if f.recipient}
    if not _looks_like_a_bounce(msg):
        lines = []  # anyone's mail may name an address beside "user unknown": not a bounce
    spoken = "\n".join(line for line in lines if not NOT_A_RECIPIENT.match(line))
    candidates = dict.fromkeys(a.group(0).strip(".") for a in ADDRESS.finditer(spoken))
    for address in itertools.islice(candidates, MAX_CANDIDATES):
        if len(findings) >= MAX_FINDINGS:
            break
        if address.lower() in ours or address.lower() in named:
            continue
        before = [spoken[max(0, m.start() - 40) : m.start()] for m in _occurrences(spoken, address)]
        if all(SENDER_BEFORE.search(text) for text in before):
            continue
        diagnostic = _context(lines, address)
        status = status_in(diagnostic) if diagnostic else None
        finding = Finding.judged(address, status, None, diagnostic, message_id)
        if finding.reason != "undefined" or status:  # an address the text gives no reason for
            reply = reply_in(diagnostic) if diagnostic else None
            findings.append(Finding.judged(address, status, reply, diagnostic, message_id))
            named.add(address.lower())
    if not findings:
        return Report((), "no bounce found")
    return Report(tuple(findings), message_id=message_id)


def parse_message(msg: Message) -> Report:
    """The report of one parsed message (see the module for the order of the rules)."""
    message_id = _message_id(msg)
    dsn = _part(msg, "message/delivery-status") or _part(msg, "message/global-delivery-status")
    dsn_report = None
    if dsn is not None:
        dsn_report = _dsn(_blocks(dsn), message_id, _cut(_own_text(msg)), _ours(msg))
        if dsn_report.findings or dsn_report.why_none != NO_RECIPIENT:
            return dsn_report
        # A report whose blocks name nobody readable (a broken or X.400 one): the detectors
        # below read its text.
    feedback = _part(msg, "message/feedback-report")
    if feedback is not None:
        return _feedback(feedback, msg, message_id)
    complaint = _provider_complaint(msg, message_id)
    if complaint is not None:
        return complaint
    if _is_auto_reply(msg):
        return Report((), "an automatic reply (RFC 3834), not a bounce")
    report = _non_standard(msg, message_id)
    return report if report.findings or dsn_report is None else dsn_report


@dataclass(frozen=True)
class ParsedLine:
    """One line of `senddock bounces parse`: a file and one recipient it reports on (as
    found), or, with kind `none`, why it reports on nobody (`diagnostic`)."""

    file: str
    recipient: str | None
    kind: str
    reason: str | None
    status: str | None
    reply: str | None
    diagnostic: str | None


def records(file: str, report: Report) -> list[ParsedLine]:
    """`senddock bounces parse`'s lines for one file: one per finding, or one saying none."""
    if not report.findings:
        return [ParsedLine(file, None, "none", None, None, None, report.why_none)]
    return [
        ParsedLine(file, f.recipient, f.kind, f.reason, f.status, f.reply, f.diagnostic)
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
