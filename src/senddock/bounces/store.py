"""Keep what comes back, once, and read it: which job each finding is about, or nobody.

`receive` stores a message's bytes under their digest and reads it in the same transaction;
a caller (the listener, the poller, the pipe) acknowledges the message only after that
transaction commits, so a crash before loses nothing (the sender keeps it) and one after
re-delivers a message whose digest is known (nothing changes). `receive_event` does the same
for a provider's verified webhook event (bounces.providers), whose findings are already read.

A finding is matched to a job by the VERP address it came to (signed: a forged one names
nobody; a report there about someone else still names only that address's job), else by our
Message-ID in the returned original when its per-recipient token holds (messages/message_id.py)
and that job still has it (invariant 10). What matches nothing is kept, unmatched, and
suppresses nobody. At most MAX_FINDINGS of a message's findings are read, their text made
storable (U+FFFD for a NUL or a lone surrogate).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from senddock import queue
from senddock.bounces.finding import Finding
from senddock.bounces.parse import parse
from senddock.bounces.verp import ReturnPath
from senddock.db import sql
from senddock.messages.message_id import names as message_id_names
from senddock.queue import bounces as effects

QUERIES = sql.load(__package__, "store.sql")

Conn = psycopg.Connection[dict[str, Any]]

# Findings read from one message or event: a returned message of ours names one recipient (an
# ARF, a provider's batch a few); 20,000 recipient blocks in one message took 33-54 s.
MAX_FINDINGS = 100
ENVELOPE_CHARS = 2000  # of the addresses a message came to, as kept
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True)
class Received:
    """What became of one message: its row, and whether it was new."""

    id: int
    new: bool
    state: str
    findings: int = 0
    matched: int = 0


@dataclass(frozen=True)
class Match:
    """The job a finding is about."""

    broadcast_id: int
    subscriber_id: int


def _match(
    conn: Conn,
    finding: Finding,
    named: tuple[int, int] | None,
    fallback_message_id: str | None,
    message_key: bytes | None,
) -> Match | None:
    if named is not None:
        return Match(*named)  # the return path is signed: it names this job, and only it
    message_id = finding.message_id or fallback_message_id
    if not message_id or message_key is None:
        return None
    pair = message_id_names(message_key, message_id)
    if pair is None:
        return None  # not ours, made up, or from before our Message-IDs carried a token
    job = conn.execute(QUERIES["job_by_pair"], {"b": pair[0], "s": pair[1]}).fetchone()
    if job is None or job["message_id"].lower() != message_id.strip().lower():
        return None  # a job retention deleted (or the token of another domain's message)
    return Match(*pair)


def _message_key(conn: Conn) -> bytes | None:
    row = conn.execute(QUERIES["message_key"]).fetchone()
    return str(row["value"]).encode() if row else None


def _clean(text: str | None) -> str | None:
    """Text Postgres can keep whatever a report says: no NUL, no lone surrogate (U+FFFD)."""
    return None if text is None else _UNSTORABLE.sub("\ufffd", text)


Recorded = list[tuple[int, Finding, Match | None]]


def _record_findings(
    conn: Conn,
    message: int,
    findings: tuple[Finding, ...],
    named: tuple[int, int] | None,
    fallback_message_id: str | None,
    soft: effects.SoftLimit | None = None,
) -> Recorded:
    """The one loop over a message's findings, returned mail or provider event alike: match
    each to its job (VERP, else our Message-ID), record it and apply its effect (queue/bounces:
    suppression, the job's record, the counts), in the caller's transaction; then mark the
    message read. [(finding id, finding, match)]."""
    recorded: Recorded = []
    key = _message_key(conn) if named is None else None
    for given in findings[:MAX_FINDINGS]:
        finding = dataclasses.replace(
            given,
            recipient=_clean(given.recipient),
            status=_clean(given.status),
            reply=_clean(given.reply),
            diagnostic=_clean(given.diagnostic),
        )
        match = _match(conn, finding, named, fallback_message_id, key)
        row = conn.execute(
            QUERIES["finding"],
            {
                "message": message,
                "recipient": finding.recipient,
                "kind": finding.kind,
                "reason": finding.reason,
                "status": finding.status,
                "reply": finding.reply,
                "diagnostic": finding.diagnostic,
                "b": match.broadcast_id if match else None,
                "s": match.subscriber_id if match else None,
            },
        ).fetchone()
        assert row is not None
        effects.apply(conn, finding, match, soft or effects.SoftLimit.default())
        recorded.append((int(row["id"]), finding, match))
    why = None if any(m for _, _, m in recorded) else "matches no message of ours"
    if len(findings) > MAX_FINDINGS:
        left = f"{len(findings) - MAX_FINDINGS} findings past the first {MAX_FINDINGS} not read"
        why = left if why is None else f"{why}; {left}"
    conn.execute(QUERIES["mark"], {"id": message, "state": "read", "why": why})
    return recorded


Recipients = str | Sequence[str] | None


def _recipients(envelope_to: Recipients) -> tuple[str, ...]:
    if envelope_to is None:
        return ()
    return (envelope_to,) if isinstance(envelope_to, str) else tuple(envelope_to)


def _named(
    return_path: ReturnPath | None, key: bytes, to: tuple[str, ...]
) -> tuple[int, int] | None:
    """The job the signed return path(s) a message came to name: one, or none when the
    envelope names none or several (no relay returns one bounce to two of our messages)."""
    if return_path is None:
        return None
    pairs = {pair for address in to if (pair := return_path.read(key, address)) is not None}
    return next(iter(pairs)) if len(pairs) == 1 else None


def read(
    conn: Conn,
    message: int,
    raw: bytes,
    envelope_to: Recipients,
    return_path: ReturnPath | None,
    key: bytes,
    soft: effects.SoftLimit | None = None,
) -> tuple[str, Recorded]:
    """Parse a stored message and record its findings; (state, [(finding id, finding, match)])."""
    report = parse(raw)
    if not report.findings:
        unreadable = (report.why_none or "").startswith(("cannot be parsed", "larger than"))
        state = "unparsable" if unreadable else "none"
        conn.execute(
            QUERIES["mark"], {"id": message, "state": state, "why": _clean(report.why_none)}
        )
        return state, []
    named = _named(return_path, key, _recipients(envelope_to))
    return "read", _record_findings(conn, message, report.findings, named, report.message_id, soft)


def _store(
    conn: Conn, source: str, envelope_to: str | None, digest: bytes, raw: bytes
) -> int | Received:
    """The new row's id, or what was recorded before under this digest."""
    row = conn.execute(
        QUERIES["receive"],
        {"source": source, "envelope_to": envelope_to, "digest": digest, "size": len(raw),
         "raw": raw},
    ).fetchone()  # fmt: skip
    if row is not None:
        return int(row["id"])
    known = conn.execute(QUERIES["known"], {"digest": digest}).fetchone()
    assert known is not None
    return Received(int(known["id"]), False, str(known["state"]))


def receive(
    conn: Conn,
    source: str,
    raw: bytes,
    envelope_to: Recipients,
    return_path: ReturnPath | None,
    key: bytes,
    soft: effects.SoftLimit | None = None,
) -> Received:
    """Store and read one message in one transaction (see the module). `envelope_to` is the
    address it came to, or all of them: a message to several is kept and read once."""
    to = tuple(sorted({_clean(a.strip()) or "" for a in _recipients(envelope_to)}))
    # The same bytes to two of our addresses are two bounces; to one address twice, one.
    envelope = ",".join(to)
    digest = hashlib.sha256(envelope.lower().encode() + b"\0" + raw).digest()
    with conn.transaction():
        stored = _store(conn, source, envelope[:ENVELOPE_CHARS] or None, digest, raw)
        if isinstance(stored, Received):
            return stored
        state, recorded = read(conn, stored, raw, to, return_path, key, soft)
    matched = sum(1 for _, _, m in recorded if m is not None)
    return Received(stored, True, state, len(recorded), matched)


def receive_event(
    conn: Conn,
    source: str,
    body: bytes,
    findings: tuple[Finding, ...],
    message_id: str | None = None,
    identity: bytes | None = None,
    soft: effects.SoftLimit | None = None,
) -> Received:
    """Store a provider's verified event once and record its findings, in one transaction.

    The digest is of the source and `identity` (what the provider's signature makes unique;
    the body when None): the same event delivered again, as providers retry, changes nothing.
    Findings are matched by our Message-ID (the finding's, else `message_id`); an event with
    none is kept as `none`. The caller answers the provider only after this returns.
    """
    unique = body if identity is None else identity
    digest = hashlib.sha256(b"event\0" + source.encode() + b"\0" + unique).digest()
    with conn.transaction():
        stored = _store(conn, source, None, digest, body)
        if isinstance(stored, Received):
            return stored
        if not findings:
            why = "no bounce or complaint in this event"
            conn.execute(QUERIES["mark"], {"id": stored, "state": "none", "why": why})
            return Received(stored, True, "none")
        recorded = _record_findings(conn, stored, findings, None, message_id, soft)
    matched = sum(1 for _, _, m in recorded if m is not None)
    return Received(stored, True, "read", len(recorded), matched)


def confirm_deliveries(conn: Conn, source: str, message_ids: Sequence[str]) -> int:
    """Issue 41: a provider's signed event says it took these messages (SES Send or Delivery,
    Mailgun accepted or delivered, SendGrid processed or delivered). Each that names a job of
    ours (its token holds, invariant 10) and is still unconfirmed after a crash is sent now,
    unattended, recorded as `SOURCE-event`; any other job is left as it is. How many."""
    if not message_ids:
        return 0
    confirmed = 0
    with conn.transaction():
        key = _message_key(conn)
        if key is None:
            return 0
        for message_id in message_ids[:MAX_FINDINGS]:
            pair = message_id_names(key, message_id)
            if pair is None:
                continue  # not ours, or forged: changes nobody
            by = f"{source}-event"
            if queue.confirm_delivered(conn, pair[0], pair[1], _bracketed(message_id), by):
                confirmed += 1
        if confirmed:
            queue.finish_sync(conn)
    return confirmed


def _bracketed(message_id: str) -> str:
    """Our Message-ID as stored (`<…>`), whichever way the provider wrote it."""
    return "<" + message_id.strip().strip("<>") + ">"


def findings(
    conn: Conn,
    campaign_id: int | None,
    kind: str | None,
    limit: int = 100,
    reason: str | None = None,
) -> FindingPage:
    """The newest `limit` findings with their message (`senddock bounces list`), and how many
    more match."""
    params = {"campaign": campaign_id, "kind": kind, "reason": reason, "limit": limit}
    rows = conn.execute(QUERIES["findings"], params).fetchall()
    matching = int(rows[0]["matching"]) if rows else 0
    items = [FindingRow(**{k: v for k, v in row.items() if k != "matching"}) for row in rows]
    return FindingPage(items, matching - len(items))


@dataclass(frozen=True)
class FindingRow:
    """One recorded finding as every face lists it: its kind and reason, the recipient and
    the reply, what it matched (broadcast, subscriber, campaign; None when unmatched), and
    the returned message or event it came from (`message`) with that message's state."""

    id: int
    created_at: datetime
    kind: str
    reason: str | None
    recipient: str | None
    status: str | None
    reply: str | None
    diagnostic: str | None
    broadcast_id: int | None
    subscriber_id: int | None
    campaign_id: int | None
    message: int
    state: str
    source: str
    why: str | None

    @property
    def about(self) -> str:
        """Whom it is about: `campaign C subscriber S`, or `unmatched`."""
        if self.broadcast_id is None:
            return "unmatched"
        return f"campaign {self.campaign_id} subscriber {self.subscriber_id}"


@dataclass(frozen=True)
class FindingPage:
    """The newest findings asked for, and how many more match (`more`)."""

    items: list[FindingRow]
    more: int
