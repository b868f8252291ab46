"""The SMTP transport: one reusable session to the relay, each step named for the outcome rules.

`send()` never raises for an SMTP or network failure: it returns the Reply that ended the
attempt, tagged with the stage it happened at, so delivery/outcome.py can judge it. A failure
after the final dot was written, before its reply, is the stage "dot" (RFC 1047: the server may
have accepted the message).

aiosmtplib opens the session (connect, EHLO, STARTTLS, AUTH). The transactions then run on
`_Replies`, which takes over the connection: when the server offers PIPELINING (RFC 2920; Postfix
does) MAIL, RCPT and DATA go in one write and the body with its final dot in another, two round
trips a message instead of four. Told the next message's envelope (`then`), the session sends it
in the same write as the final dot (RFC 2920 lets message content open a group): one round trip
a message. aiosmtplib cannot pipeline: its protocol drops any reply that arrives while no
command awaits one. `bench/smtp_transport.py` (smtp-sink, 10 sessions, one process):
aiosmtplib's mail/rcpt/data 11,300 msg/s at 88 us CPU a message; this transport one command at
a time 20,100 at 49 us; pipelined 31,500 at 31 us; each next envelope with the dot 42,200 at
24 us.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import cast

import aiosmtplib
from aiosmtplib import SMTPResponse
from aiosmtplib.email import quote_address

from senddock.config import SmtpTarget
from senddock.messages import AddressProblem, wire_address
from senddock.smtp.reply import Reply

# MAIL and RCPT replies that let the transaction go on (RFC 5321: 251 forwards the mail).
_GO_ON = (250, 251)
# A reply line longer than this is a broken server, not a reply (RFC 5321 allows 512).
_MAX_LINE = 8192
# What must never reach a command line: CR or LF would let an address inject commands.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f]")
# A body up to this size waits with its final dot and goes out in one write with it; a larger
# one goes ahead of the dot, so that its transfer overlaps the wait (invariant 3 allows both).
HOLD_WHOLE_BODY = 64 * 1024
# The next message's envelope goes with a final dot only to a relay that takes at least this
# long to answer one (the quickest of the last AHEAD_WINDOW final dots: its distance, or its own
# work, as Postfix writes a message to its queue before it answers). There it saves a round trip
# a message: +10 % at 1 ms, +46 % at 2 ms, +72-79 % at 4 and 10 ms (bench/ab.py --rtt-ms, 2x5
# workers on smtp-sink). On 127.0.0.1 it would cost 7 %: each sender then needs its previous
# outcome at once, and half as many outcomes share a commit.
AHEAD_MIN_RTT = 0.001
AHEAD_WINDOW = 16


class _Replies(asyncio.Protocol):
    """A session's connection once it is open: commands out, replies back in order.

    Every reply that arrives is parsed and kept until asked for, so the replies to pipelined
    commands may come in one segment or in several.
    """

    def __init__(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.WriteTransport, transport)
        self._buffer = bytearray()
        self._lines: list[str] = []  # the lines so far of a multi-line reply
        self._ready: collections.deque[SMTPResponse] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._failed: aiosmtplib.SMTPException | None = None

    @property
    def open(self) -> bool:
        return self._failed is None and not self.transport.is_closing()

    @property
    def idle(self) -> bool:
        """Open, and no reply came unasked (a server says 421 before it hangs up)."""
        return self.open and not self._ready

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while (end := self._buffer.find(b"\n")) >= 0:
            line = bytes(self._buffer[: end + 1])
            del self._buffer[: end + 1]
            try:
                code = int(line[:3])
            except ValueError:
                self._fail(aiosmtplib.SMTPResponseException(-1, f"malformed reply {line[:80]!r}"))
                return
            self._lines.append(line[4:].strip(b" \t\r\n").decode("utf-8", "surrogateescape"))
            if line[3:4] != b"-":
                self._ready.append(SMTPResponse(code, "\n".join(self._lines)))
                self._lines = []
        if len(self._buffer) > _MAX_LINE:
            self._fail(aiosmtplib.SMTPResponseException(-1, "reply line too long"))
        elif self._ready:
            self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        lost = aiosmtplib.SMTPServerDisconnected("Connection lost")
        lost.__cause__ = exc
        self._fail(lost)

    def _fail(self, exc: aiosmtplib.SMTPException) -> None:
        if self._failed is None:
            self._failed = exc
        self.transport.close()
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def write(self, data: bytes) -> None:
        if not self.open:
            raise self._failed or aiosmtplib.SMTPServerDisconnected("Connection lost")
        self.transport.write(data)

    async def reply(self, timeout: float | None) -> SMTPResponse:
        """The next reply; SMTPException if the connection failed first, TimeoutError.

        The timer is set only when a wait is needed (a plain call_later: asyncio.timeout()
        costs ~5 % of a worker's CPU at two waits a message)."""
        while not self._ready:
            if self._failed is not None:
                raise self._failed
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
            try:
                await waiter
            finally:
                if timer is not None:
                    timer.cancel()
        return self._ready.popleft()

    async def command(self, line: bytes, timeout: float | None) -> SMTPResponse:
        self.write(line + b"\r\n")
        return await self.reply(timeout)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError("no reply from the server in time"))


class SmtpSession:
    """A connection to the relay that is opened lazily and reused until it fails."""

    def __init__(
        self,
        target: SmtpTarget,
        timeout: float,
        verify_certs: bool = True,
        ahead_min_rtt: float = AHEAD_MIN_RTT,
    ) -> None:
        """`ahead_min_rtt`: how far the server must be for `then` to be taken (0: always, if
        the server pipelines; for a sender with no commit to wait for)."""
        self.target = target
        self.timeout = timeout
        self.verify_certs = verify_certs
        self.ahead_min_rtt = ahead_min_rtt
        self._conn: _Replies | None = None
        self._pipelining = False
        self._smtputf8 = False
        # (sender, recipient) of the envelope sent with the last final dot (MAIL, RCPT, DATA),
        # whose replies the `send()` of that message reads.
        self._ahead: tuple[str, str] | None = None
        # Seconds from each recent final dot to its reply.
        self._round_trips: collections.deque[float] = collections.deque(maxlen=AHEAD_WINDOW)

    @property
    def connected(self) -> bool:
        if self._conn is None:
            return False
        # Replies to an envelope sent ahead are expected, not a server's parting words.
        return self._conn.open if self._ahead is not None else self._conn.idle

    async def open(self) -> Reply | None:
        """Open the session now unless it is open: None, or the Reply that ended the try.

        The worker opens before it waits for a rate-limit permit, so the permit is spent at
        MAIL FROM and not on a handshake.
        """
        return None if self.connected else await self._open()

    async def _open(self) -> Reply | None:
        """Connect, EHLO, STARTTLS and AUTH as the URL says; a Reply on failure, else None."""
        self.close()
        t = self.target
        smtp = aiosmtplib.SMTP(
            hostname=t.host,
            port=t.port,
            use_tls=t.tls == "tls",
            start_tls=False,
            validate_certs=self.verify_certs,
            timeout=self.timeout,
            local_hostname=socket.gethostname(),
        )
        stage = "connect"
        try:
            await smtp.connect()
            stage = "ehlo"
            await smtp.ehlo()
            if t.tls == "starttls":
                stage = "starttls"
                await smtp.starttls()
            if t.username:
                stage = "auth"
                await smtp.login(t.username, t.password or "")
        except aiosmtplib.SMTPResponseException as exc:
            smtp.close()
            return Reply(stage, exc.code, exc.message)
        except (TimeoutError, aiosmtplib.SMTPException, OSError, ssl.SSLError) as exc:
            smtp.close()
            return Reply(stage, None, _describe(exc))
        transport = smtp.transport
        if transport is None or transport.is_closing():
            return Reply(stage, None, "connection lost")
        # From here the transactions are ours: the connection's events come to _Replies.
        self._conn = _Replies(transport)
        transport.set_protocol(self._conn)
        self._pipelining = smtp.supports_extension("pipelining")
        self._smtputf8 = smtp.supports_extension("smtputf8")
        return None

    async def send(
        self,
        sender: str,
        recipient: str,
        message: bytes,
        before_dot: Callable[[], Awaitable[None]] | None = None,
        then: Callable[[], tuple[str, str] | None] | None = None,
        at_dot: Callable[[], None] | None = None,
    ) -> Reply:
        """One message to one recipient; the Reply says how it ended (250 at data = sent).

        With `before_dot`, the envelope goes out at once and the final dot, which makes the
        server accept, waits for `before_dot()` (invariant 3); so does the body unless it is
        larger than HOLD_WHOLE_BODY, so that a small message costs one write for both.

        `then()`, asked once that wait is over, names the next message on this session as
        (sender, recipient), or None: if the server pipelines and is far (`far`), that
        envelope goes out with this final dot, and the next `send()` for it reads the replies.
        A `send()` for another message, or `quit()`, hangs up instead: the server may be in
        that envelope's DATA, which only a dot would end.

        `at_dot()` is called right before the write that carries the final dot, with nothing
        in between that could wait or fail (the worker's dot log: delivery/dotlog.py).
        """
        ahead = self._ahead == (sender, recipient) and self.connected
        if self._ahead is not None and not ahead:
            self.close()  # another message's DATA may have begun: never end it
        self._ahead = None
        stage = "mail"
        try:
            while True:
                if not ahead and not self.connected:
                    failed = await self._open()
                    if failed is not None:
                        return failed
                conn = self._conn
                assert conn is not None
                envelope = self._envelope(sender, recipient)
                if isinstance(envelope, Reply):
                    return envelope  # (never one sent ahead: that one passed this check)
                try:
                    stage, resp = await self._start(conn, envelope, sent=ahead)
                    break
                except _Broken as exc:
                    if not ahead or exc.stage != "mail":
                        raise
                # The session ended before any reply to the envelope sent ahead: as with a
                # session found closed, open another and send the envelope again (no dot went
                # for it).
                self.close()
                ahead = False
            if stage == "data":
                resp = await self._data(conn, message, before_dot, then, at_dot)
                if resp.code == 250:
                    return Reply("data", 250, resp.message)
            await self._reset(resp.code)  # refused: the session goes on after RSET
            return Reply(stage, resp.code, resp.message)
        except _Broken as exc:
            self.close()
            return Reply(exc.stage, None, _describe(exc.__cause__ or exc))
        except (TimeoutError, aiosmtplib.SMTPException, OSError) as exc:
            self.close()
            return Reply(stage, None, _describe(exc))

    def _envelope(self, sender: str, recipient: str) -> tuple[bytes, bytes] | Reply:
        """MAIL FROM and RCPT TO lines; a Reply instead for an address this server can't take.

        No server said so: a bad sender is charged to MAIL (about us: it pauses the broadcast
        and suppresses nobody), a bad recipient to RCPT as rejected, never as a bounce.
        """
        wire = []
        for stage, address in (("mail", sender), ("rcpt", recipient)):
            if _UNSAFE.search(address):
                return Reply(stage, 553, "5.5.4 not sent: a control character in the address")
            try:
                address = wire_address(address)  # an IDNA domain in A-labels
            except AddressProblem as exc:
                return Reply(stage, 553, f"5.6.7 not sent: {exc}")
            if not address.isascii() and not self._smtputf8:
                text = (
                    "5.6.7 not sent: the address has a non-ASCII local part, which needs"
                    " SMTPUTF8, and the server does not offer it"
                )
                return Reply(stage, 553, text)
            wire.append(address)
        sender, recipient = wire
        mail = b"MAIL FROM:" + _bracketed(sender)
        if not (sender.isascii() and recipient.isascii()):
            mail += b" SMTPUTF8"
        return mail, b"RCPT TO:" + _bracketed(recipient)

    async def _start(
        self, conn: _Replies, envelope: tuple[bytes, bytes], sent: bool = False
    ) -> tuple[str, SMTPResponse]:
        """MAIL, RCPT and DATA: ("data", its 354), or the stage refused first and its reply.
        A network failure raises _Broken, naming the stage it hit.

        Pipelined, the three go in one write (unless `sent` with the last final dot) and their
        replies are read in order. A refusal stands even if the connection breaks after it; a
        server that starts DATA for a refused recipient is hung up on rather than sent a dot.
        """
        steps = (("mail", _GO_ON), ("rcpt", _GO_ON), ("data", (354,)))
        lines = _lines(envelope)
        if self._pipelining and not sent:
            conn.write(b"".join(lines))
        refused: tuple[str, SMTPResponse] | None = None
        for (stage, accepted), line in zip(steps, lines, strict=True):
            if refused is not None and not self._pipelining:
                break
            try:
                if self._pipelining:
                    resp = await conn.reply(self.timeout)
                else:
                    conn.write(line)
                    resp = await conn.reply(self.timeout)
            except (TimeoutError, aiosmtplib.SMTPException, OSError) as exc:
                if refused is None:
                    raise _Broken(stage) from exc
                self.close()  # the refusal decides; the session is spent
                break
            if refused is None:
                if resp.code not in accepted:
                    refused = (stage, resp)
            elif stage == "data" and resp.code == 354:
                self.close()  # DATA began for a refused recipient: never end it
        return refused or ("data", resp)

    async def _data(
        self,
        conn: _Replies,
        message: bytes,
        before_dot: Callable[[], Awaitable[None]] | None,
        then: Callable[[], tuple[str, str] | None] | None,
        at_dot: Callable[[], None] | None = None,
    ) -> SMTPResponse:
        """After DATA's 354: the dot-stuffed body and the final dot, the dot after
        `before_dot()`, and with it the envelope `then()` names, if the server pipelines.

        The body waits with the dot unless it is large: one write instead of two per message.
        """
        body = _stuffed(message)
        if before_dot is not None:
            if len(body) > HOLD_WHOLE_BODY:
                conn.write(body)
                body = b""
            await before_dot()
        # The end-of-data line is ".": after the body, or alone after a large one (RFC 5321).
        body += b".\r\n"
        following = then() if then is not None and self.far else None
        if following is not None:
            envelope = self._envelope(*following)
            if not isinstance(envelope, Reply):  # an envelope we refuse goes no further
                body += b"".join(_lines(envelope))
                self._ahead = following
        if at_dot is not None:
            at_dot()
        sent = time.monotonic()
        conn.write(body)
        try:
            resp = await conn.reply(self.timeout)
        except (TimeoutError, aiosmtplib.SMTPException, OSError) as exc:
            # The final dot went: the server may have accepted it (RFC 1047).
            raise _Broken("dot") from exc
        self._round_trips.append(time.monotonic() - sent)
        return resp

    @property
    def far(self) -> bool:
        """Does the next envelope go with the final dot? If the server pipelines and the
        quickest of the last AHEAD_WINDOW final dots took `ahead_min_rtt` or more to answer."""
        if not self._pipelining or self.ahead_min_rtt <= 0:
            return self._pipelining
        trips = self._round_trips
        return len(trips) == AHEAD_WINDOW and min(trips) >= self.ahead_min_rtt

    async def _reset(self, code: int) -> None:
        """RSET after a refusal so the session can carry the next message (not after a 421).

        Not with an envelope sent ahead: a refused final dot ended its transaction anyway, and
        an RSET after that envelope's DATA would be read as message text."""
        if self._conn is None or not self._conn.open or code == 421:
            self.close()
            return
        if self._ahead is not None:
            return
        try:
            await self._conn.command(b"RSET", self.timeout)
        except (TimeoutError, aiosmtplib.SMTPException, OSError):
            self.close()

    async def quit(self) -> None:
        if self._ahead is not None:
            self.close()  # its DATA may have begun: hang up, never send a dot for it
            return
        if self._conn is not None and self._conn.open:
            with contextlib.suppress(aiosmtplib.SMTPException, OSError, TimeoutError):
                await self._conn.command(b"QUIT", 5)
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.transport.close()
        self._conn = None
        self._ahead = None


# An address as the worker has it: a bare addr-spec, nothing for aiosmtplib's parser to strip.
_BARE = re.compile(r'[^\s<>()\[\]\\,;:"@]+@[^\s<>()\[\]\\,;:"@]+')


def _bracketed(address: str) -> bytes:
    """The address as MAIL FROM and RCPT TO carry it: <local@domain>. A bare address is
    bracketed as it is (email.utils' parser costs ~5 us a call); anything else is parsed."""
    if _BARE.fullmatch(address):
        return b"<" + address.encode("utf-8") + b">"
    return quote_address(address).encode("utf-8")


def _lines(envelope: tuple[bytes, bytes]) -> tuple[bytes, bytes, bytes]:
    """MAIL, RCPT and DATA as the wire carries them."""
    mail, rcpt = envelope
    return mail + b"\r\n", rcpt + b"\r\n", b"DATA\r\n"


class _Broken(Exception):
    """A network failure during `stage` of a transaction."""

    def __init__(self, stage: str) -> None:
        super().__init__(stage)
        self.stage = stage


_BARE_LF = re.compile(rb"(?<!\r)\n")
_LEADING_DOT = re.compile(rb"(?m)^\.")


def _stuffed(message: bytes) -> bytes:
    """The body as DATA carries it: CRLF line ends, leading dots doubled, ending in CRLF.

    A rendered message has CRLF line ends and seldom a leading dot: three scans in C find
    that, where the two substitutions cost ~15 us per 1.5 KB message.
    """
    body = message
    if body.count(b"\n") != body.count(b"\r\n"):
        body = _BARE_LF.sub(b"\r\n", body)
    if body.startswith(b".") or b"\n." in body:
        body = _LEADING_DOT.sub(b"..", body)
    return body if body.endswith(b"\r\n") else body + b"\r\n"


def _describe(exc: BaseException) -> str:
    """A one-line description of a network failure, naming DNS, refusal, reset or timeout."""
    cause = exc.__cause__ or exc.__context__
    for e in (exc, cause):
        if isinstance(e, socket.gaierror):
            return f"DNS failure: {e}"
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, ConnectionResetError):
            return "connection reset"
        if isinstance(e, TimeoutError | asyncio.TimeoutError | aiosmtplib.SMTPTimeoutError):
            return "timeout"
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())
