"""`senddock bounces poll`: read a bounce mailbox over IMAP or POP3, lose nothing, apply once.

For each message: fetch it (at most the size cap: a bigger one is kept as too large), hand
it to the store, and only once the store's transaction has committed delete it (IMAP: flag
and expunge that UID, or move it to a folder; POP3: DELE, applied at QUIT). A crash between
the commit and the delete leaves the message for the next poll, whose store finds its
digest and changes nothing: nothing lost, nothing applied twice. A store that fails (the
database is down) stops the pass with the message left in the box.

The mailbox is a URL, from SENDDOCK_BOUNCE_MAILBOX:
`imap://user:password@host:143/INBOX?tls=starttls`, `imaps://…:993/INBOX`,
`pop3://…:110?tls=starttls`, `pop3s://…:995`; `?after=move:Processed` moves instead of
deleting (IMAP). TLS is verified against the system's CAs; `tls=none` is for 127.0.0.1.
"""

from __future__ import annotations

import email.parser
import email.policy
import os
import poplib
import signal
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, cast
from urllib.parse import parse_qs, unquote, urlsplit

from imapclient import IMAPClient  # type: ignore[import-untyped]

from senddock.bounces.parse import MAX_BYTES
from senddock.bounces.store import Received

# Test hook (the crash tests): "stored:N" SIGKILLs the poller once the Nth message of its pass
# is committed, before it leaves the mailbox; "flagged:N" once the Nth is flagged \Deleted,
# before its expunge (IMAP). Unset in production.
KILL_POLL = os.environ.get("SENDDOCK_TEST_KILL_POLL") or None


def _kill_at(stage: str, done: Pass) -> None:
    if KILL_POLL is not None and f"{stage}:{done.seen}" == KILL_POLL:
        os.kill(os.getpid(), signal.SIGKILL)


Store = Callable[[bytes, str | None], Received]
Tls = Literal["none", "starttls", "tls"]
PORTS = {"imap": 143, "imaps": 993, "pop3": 110, "pop3s": 995}
ADDRESS_HEADERS = ("X-Original-To", "Delivered-To", "Envelope-To")


@dataclass(frozen=True)
class Mailbox:
    """Where bounces are read from, parsed from its URL (ValueError names what is wrong)."""

    protocol: Literal["imap", "pop3"]
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    folder: str = "INBOX"
    tls: Tls = "starttls"
    move_to: str | None = None

    @classmethod
    def parse(cls, url: str) -> Mailbox:
        parts = urlsplit(url)
        if parts.scheme not in PORTS:
            raise ValueError("a bounce mailbox is an imap://, imaps://, pop3:// or pop3s:// URL")
        if not parts.hostname or not parts.username:
            raise ValueError("a bounce mailbox URL needs a user and a host")
        query = parse_qs(parts.query)
        tls = query.get("tls", ["tls" if parts.scheme.endswith("s") else "starttls"])[0]
        if tls not in ("none", "starttls", "tls"):
            raise ValueError(f"tls={tls!r}: use none, starttls or tls")
        after = query.get("after", ["delete"])[0]
        if after != "delete" and not after.startswith("move:"):
            raise ValueError(f"after={after!r}: use delete or move:FOLDER")
        protocol: Literal["imap", "pop3"] = "imap" if parts.scheme.startswith("imap") else "pop3"
        if protocol == "pop3" and after != "delete":
            raise ValueError("POP3 can only delete what it has read")
        return cls(
            protocol=protocol,
            host=parts.hostname,
            port=parts.port or PORTS[parts.scheme],
            user=unquote(parts.username),
            password=unquote(parts.password or ""),
            folder=unquote(parts.path.lstrip("/")) or "INBOX",
            tls=tls,  # type: ignore[arg-type]
            move_to=after.removeprefix("move:") if after != "delete" else None,
        )


@dataclass
class Pass:
    """What one poll did."""

    seen: int = 0
    recorded: int = 0
    duplicates: int = 0
    error: str | None = None


def envelope_to(raw: bytes) -> str | None:
    """The address the message was delivered to, as the delivering MTA wrote it."""
    head = raw.split(b"\r\n\r\n", 1)[0].split(b"\n\n", 1)[0]
    headers = email.parser.BytesHeaderParser(policy=email.policy.compat32).parsebytes(head)
    for name in ADDRESS_HEADERS:
        value = headers.get(name)
        if value:
            return str(value).strip().strip("<>") or None
    return None


def _stored(store: Store, raw: bytes, done: Pass) -> None:
    received = store(raw, envelope_to(raw))
    done.recorded += received.new
    done.duplicates += not received.new


def _imap(box: Mailbox, store: Store, done: Pass, limit: int) -> None:
    context = ssl.create_default_context()
    with IMAPClient(
        box.host, port=box.port, ssl=box.tls == "tls", ssl_context=context, timeout=30
    ) as client:
        if box.tls == "starttls":
            client.starttls(context)
        client.login(box.user, box.password)
        client.select_folder(box.folder)
        # A poller killed between flagging a message and expunging it left it flagged: its
        # outcome was committed before the flag, so it goes now.
        client.expunge()
        uids = client.search(["NOT", "DELETED"])[:limit]
        for uid in uids:
            sizes = client.fetch([uid], ["RFC822.SIZE"])
            if uid not in sizes:
                continue  # expunged meanwhile by another poller
            # A message over the cap is read up to it: kept as too large, for a person.
            part = f"BODY.PEEK[]<0.{MAX_BYTES + 1}>"
            fetched = client.fetch([uid], [part])[uid]
            raw = next((v for k, v in fetched.items() if k.startswith(b"BODY[]")), b"")
            done.seen += 1
            _stored(store, bytes(raw), done)
            _kill_at("stored", done)
            # Committed: now, and only now, it may leave the mailbox.
            if box.move_to:
                client.move([uid], box.move_to)
            else:
                client.delete_messages([uid])
                _kill_at("flagged", done)
                client.uid_expunge([uid]) if client.has_capability("UIDPLUS") else client.expunge()


def _pop3(box: Mailbox, store: Store, done: Pass, limit: int) -> None:
    context = ssl.create_default_context()
    pop = (
        poplib.POP3_SSL(box.host, box.port, timeout=30, context=context)
        if box.tls == "tls"
        else poplib.POP3(box.host, box.port, timeout=30)
    )
    try:
        if box.tls == "starttls":
            pop.stls(context)
        pop.user(box.user)
        pop.pass_(box.password)
        count, _ = pop.stat()
        for number in range(1, min(count, limit) + 1):
            answer = cast(bytes, pop.list(number))  # b"+OK n size" for one message
            size = int(answer.split()[2])
            if size > MAX_BYTES:
                # Read no more than the headers: kept as too large (the marker says so).
                head = b"\r\n".join(pop.top(number, 0)[1])
                raw = head + b"\r\n\r\n" + b"x" * (MAX_BYTES + 1 - len(head))
            else:
                raw = b"\r\n".join(pop.retr(number)[1]) + b"\r\n"
            done.seen += 1
            _stored(store, raw, done)
            _kill_at("stored", done)
            pop.dele(number)  # applied at QUIT: a crash before it re-reads, deduplicated
        pop.quit()
    except BaseException:
        pop.close()  # no QUIT: nothing is deleted
        raise


def poll_once(box: Mailbox, store: Store, limit: int = 500) -> Pass:
    """One pass over the mailbox (at most `limit` messages)."""
    done = Pass()
    try:
        (_imap if box.protocol == "imap" else _pop3)(box, store, done, limit)
    except Exception as exc:
        done.error = f"{type(exc).__name__}: {exc}"
    return done
