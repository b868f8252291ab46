"""An embedded SMTP server that keeps what it receives and misbehaves on request.

`senddock demo` sends to it, and the test suite asserts on what it RECEIVED. Faults are chosen
per recipient (a rule function, or by default the address convention: bounce-*, flaky-*,
flakydata-*, drop-*, stall-*) plus server-wide switches (reject MAIL FROM, AUTH, the greeting;
stop listening). The server runs on its own event loop in a background thread.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from email.parser import BytesHeaderParser
from types import TracebackType
from typing import Any, Literal, NoReturn, Self, cast
from urllib.parse import quote

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

FaultKind = Literal[
    "reject_rcpt", "defer_rcpt", "defer_data", "reject_data", "disconnect", "stall", "stall_rcpt"
]

REJECT_RCPT = "550 5.1.1 <{addr}>: no such user"
DEFER = "451 4.3.0 try again later"
REJECT_DATA = "554 5.7.1 message rejected as spam"
REJECT_MAIL_FROM = "553 5.7.1 sender not allowed"
REJECT_AUTH = "535 5.7.8 Authentication credentials invalid"
REJECT_CONNECT = "554 5.3.2 service not available"
AUTH_REQUIRED = "530 5.7.0 Authentication required"
ACCEPTED = "250 2.0.0 OK"

_RCPT_KINDS = frozenset({"reject_rcpt", "defer_rcpt", "stall_rcpt"})
_DEFAULT_REPLY: dict[str, str] = {
    "reject_rcpt": REJECT_RCPT,
    "defer_rcpt": DEFER,
    "defer_data": DEFER,
    "reject_data": REJECT_DATA,
}
_REPLY_CLASS = {"reject_rcpt": "5", "defer_rcpt": "4", "defer_data": "4", "reject_data": "5"}
_HEADERS = BytesHeaderParser()


@dataclass(frozen=True, slots=True)
class Fault:
    """How the catcher mistreats one recipient; build one with the class methods.

    `attempts`: the fault applies to that recipient's first N attempts (None: always); an
    attempt is one RCPT TO naming it. `reply` may contain "{addr}". For "stall", the catcher
    sleeps `seconds` before answering DATA, then accepts or drops (`then`); `record_first`
    keeps the message before stalling, like a server that delivered but whose reply was lost.
    """

    kind: FaultKind
    reply: str = ""
    attempts: int | None = None
    seconds: float = 0.0
    then: Literal["accept", "drop"] = "accept"
    record_first: bool = False

    def __post_init__(self) -> None:
        if self.attempts is not None and self.attempts < 1:
            raise ValueError(f"attempts must be >= 1 or None, got {self.attempts}")
        if self.seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {self.seconds}")
        want = _REPLY_CLASS.get(self.kind)
        if self.reply and (want is None or not self.reply.startswith(want)):
            raise ValueError(f"a {self.kind} fault cannot reply {self.reply!r}")

    @classmethod
    def reject_rcpt(cls, reply: str = REJECT_RCPT, attempts: int | None = None) -> Fault:
        """Permanent rejection at RCPT TO (a bounce)."""
        return cls("reject_rcpt", reply, attempts)

    @classmethod
    def defer_rcpt(cls, attempts: int | None = 2, reply: str = DEFER) -> Fault:
        """Transient 4xx at RCPT TO for the first `attempts` attempts, then accept."""
        return cls("defer_rcpt", reply, attempts)

    @classmethod
    def defer_data(cls, attempts: int | None = 2, reply: str = DEFER) -> Fault:
        """Transient 4xx after DATA for the first `attempts` attempts, then accept."""
        return cls("defer_data", reply, attempts)

    @classmethod
    def reject_data(cls, reply: str = REJECT_DATA, attempts: int | None = None) -> Fault:
        """Permanent 5xx after DATA (content or policy rejection)."""
        return cls("reject_data", reply, attempts)

    @classmethod
    def disconnect(cls, attempts: int | None = 1) -> Fault:
        """Drop the connection after the data arrives, before replying; nothing is kept."""
        return cls("disconnect", attempts=attempts)

    @classmethod
    def stall(
        cls,
        seconds: float = 5.0,
        attempts: int | None = 1,
        then: Literal["accept", "drop"] = "accept",
        record_first: bool = False,
    ) -> Fault:
        """Sleep before replying to DATA, then accept or drop the connection."""
        return cls("stall", "", attempts, seconds, then, record_first)

    @classmethod
    def stall_rcpt(cls, seconds: float = 5.0, attempts: int | None = 1) -> Fault:
        """Sleep before answering RCPT TO (a slow recipient check), then accept: the sender
        is caught before its final dot."""
        return cls("stall_rcpt", "", attempts, seconds)

    @property
    def stage(self) -> Literal["rcpt", "data"]:
        """Where the fault strikes: at RCPT TO, or after the message data."""
        return "rcpt" if self.kind in _RCPT_KINDS else "data"

    def applies(self, attempt: int) -> bool:
        """Whether the fault strikes on this (1-based) attempt for its recipient."""
        return self.attempts is None or attempt <= self.attempts

    def reply_for(self, address: str) -> str:
        """The SMTP reply line sent for `address`."""
        reply = self.reply or _DEFAULT_REPLY.get(self.kind, "")
        return reply.replace("{addr}", address)


FaultRule = Callable[[str], Fault | None]
"""Chooses the fault for a recipient address (None: behave)."""

_CONVENTIONS: tuple[tuple[str, Fault], ...] = (
    ("bounce-", Fault.reject_rcpt()),
    ("flakydata-", Fault.defer_data(attempts=2)),
    ("flaky-", Fault.defer_rcpt(attempts=2)),
    ("drop-", Fault.disconnect(attempts=1)),
    ("stall-", Fault.stall(seconds=5.0, attempts=1)),
)


def convention_fault(address: str) -> Fault | None:
    """The default rule: a fault chosen by the local part's prefix (case-insensitive)."""
    local = address.split("@", 1)[0].lower()
    for prefix, fault in _CONVENTIONS:
        if local.startswith(prefix):
            return fault
    return None


@dataclass(frozen=True, slots=True)
class Received:
    """One accepted message for one recipient (a DATA to N recipients gives N of these)."""

    mail_from: str
    rcpt: str
    data: bytes
    message_id: str | None
    at: float  # time.time() when accepted
    tls: bool = False  # it came over TLS (STARTTLS or TLS from the first byte)


def message_id_of(data: bytes) -> str | None:
    """The Message-ID header of raw message bytes, unfolded; only the header block is parsed."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        end = data.find(b"\n\n")
    head = data if end < 0 else data[: end + 2]
    value = _HEADERS.parsebytes(head).get("Message-ID")
    if value is None:
        return None
    return "".join(str(value).split()) or None


def _reply(setting: str | bool | None, default: str) -> str | None:
    """A server-wide switch as a reply: falsy is off, True the default, a string itself."""
    if isinstance(setting, str):
        return setting or None
    return default if setting else None


class _QuietSession(Session):
    """A Session whose legacy `login_data` is a plain attribute, so AUTH logs no warning."""

    login_data: Any = None


class _Envelope(Envelope):
    """An Envelope that also remembers, per accepted RCPT, its attempt number and fault."""

    def __init__(self) -> None:
        super().__init__()
        self.faults: list[tuple[int, Fault | None]] = []


class _Wire:
    """The recipients of each final dot in a session's raw bytes (a plain-text session)."""

    def __init__(self) -> None:
        self._partial = b""
        self._rcpts: list[str] = []
        self._in_data = False

    def feed(self, data: bytes) -> list[list[str]]:
        lines = (self._partial + data).split(b"\r\n")
        self._partial = lines.pop()
        dots: list[list[str]] = []
        for line in lines:
            head = line[:10].upper()
            if self._in_data and line == b".":
                dots.append(self._rcpts)
                self._rcpts, self._in_data = [], False
            elif head.startswith((b"MAIL FROM:", b"RSET")):
                self._rcpts, self._in_data = [], False
            elif self._in_data:
                continue
            elif head.startswith(b"RCPT TO:"):
                self._rcpts.append(line[8:].strip(b" <>").decode("utf-8", "replace"))
            elif head == b"DATA":
                self._in_data = True
        return dots


class _CatcherSMTP(SMTP):
    """One SMTP session; registers itself so the catcher can drop it."""

    def __init__(
        self,
        live: set[_CatcherSMTP],
        handler: _Handler,
        dots: Callable[[list[str]], None],
        **kwargs: Any,
    ) -> None:
        super().__init__(handler, **kwargs)
        self._live = live
        self._catcher_dots = dots
        self._wire = _Wire()

    def _create_session(self) -> Session:
        return _QuietSession(self.loop)

    def _create_envelope(self) -> Envelope:
        return _Envelope()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._live.add(self)

    def data_received(self, data: bytes) -> None:
        # Final dots as they arrive on the wire, before aiosmtpd reads them: a client that
        # hangs up right after its dot leaves a message aiosmtpd never reads (it cancels the
        # session at EOF), though a relay that reads on would have accepted it.
        for rcpts in self._wire.feed(data):
            self._catcher_dots(rcpts)
        super().data_received(data)

    def connection_lost(self, error: Exception | None) -> None:
        self._live.discard(self)
        super().connection_lost(error)


class _Refuser(asyncio.Protocol):
    """Answers the greeting with a refusal and hangs up (the `reject_connect` switch)."""

    def __init__(self, reply: str) -> None:
        self._reply = reply

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        cast(asyncio.WriteTransport, transport).write(self._reply.encode() + b"\r\n")
        transport.close()


class _Handler:
    """The aiosmtpd hooks; thin, so the logic stays on the Catcher."""

    def __init__(self, catcher: Catcher) -> None:
        self._catcher = catcher

    async def handle_EHLO(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        hostname: str,
        responses: list[str],
    ) -> list[str]:
        session.host_name = hostname  # the hook's duty once it exists (aiosmtpd)
        if self._catcher.pipelining:
            responses.insert(-1, "250-PIPELINING")  # aiosmtpd reads commands one at a time
        if not self._catcher.smtputf8:
            responses = [r for r in responses if r != "250-SMTPUTF8"]
        return responses

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        return self._catcher._on_mail(session, envelope, address, options)

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: _Envelope, address: str, options: list[str]
    ) -> str:
        return await self._catcher._on_rcpt(envelope, address, options)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: _Envelope) -> str:
        return await self._catcher._on_data(server, envelope)


class Catcher:
    """An SMTP server on 127.0.0.1 that records every accepted message, with fault injection.

    Use as a context manager or via start()/stop(). With `user`/`password` it offers AUTH
    PLAIN/LOGIN without TLS and (if `require_auth`) refuses MAIL FROM before AUTH. With `tls`
    "starttls" or "tls" and a server `tls_context`, it offers STARTTLS or speaks TLS at once.
    Switches `reject_mail_from`, `reject_auth`, `reject_connect` take True (default reply), a
    reply string, or None/False (off) and may be flipped at any time from any thread.
    """

    def __init__(
        self,
        fault_for: FaultRule | None = None,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        user: str | None = None,
        password: str | None = None,
        require_auth: bool = True,
        hostname: str = "catcher.senddock.test",
        tls: Literal["none", "starttls", "tls"] = "none",
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        if (user is None) != (password is None):
            raise ValueError("give both user and password, or neither")
        if (tls == "none") != (tls_context is None):
            raise ValueError("give tls_context with tls='starttls' or 'tls', and only then")
        self.tls = tls
        self._tls_context = tls_context
        self.fault_for: FaultRule = fault_for or convention_fault
        self.reject_mail_from: str | bool | None = None
        self.reject_auth: str | bool | None = None
        self.reject_connect: str | bool | None = None
        self.require_auth = require_auth
        # Offer PIPELINING (RFC 2920), as Postfix does; False: senders go one command at a time.
        self.pipelining = True
        # Offer SMTPUTF8 (RFC 6531): non-ASCII addresses; False: a relay that lacks it.
        self.smtputf8 = True
        # Called on the catcher's loop with (session number, message) when a final dot arrives
        # and before the message is accepted: tests look at what the sender had recorded then.
        self.on_dot: Callable[[int, bytes], None] | None = None
        # Final dots that arrived with the next command behind them, in the same read: the
        # sender wrote the next envelope with the dot, without waiting for the dot's reply.
        self.dots_with_more = 0
        # Seconds to wait before answering each final dot, as a relay that writes the message
        # to its queue first, or a far one: senders then send their next envelope with the dot.
        self.dot_delay = 0.0
        self.host = host
        self.hostname = hostname
        self._user = user
        self._password = password
        self._port = port
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._received: list[Received] = []
        # Final dots that reached the server, per lower-cased recipient, read off the wire
        # (plain-text sessions): whether aiosmtpd then accepted the message or not.
        self.dots_arrived: Counter[str] = Counter()
        self._attempts: Counter[str] = Counter()
        self._connections = 0
        self._handler = _Handler(self)
        self._live: set[_CatcherSMTP] = set()  # touched only on the loop thread
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Self:
        """Start the loop thread and listen; returns self once connections are accepted."""
        if self._thread is not None:
            raise RuntimeError("catcher already running")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(
            target=self._run_loop, args=(loop,), name="senddock-catcher", daemon=True
        )
        self._loop, self._thread = loop, thread
        thread.start()
        try:
            self._call(self._listen())
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Drop every session, stop listening and end the loop thread. Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            self._call(self._shutdown())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            if not thread.is_alive():
                loop.close()
            self._loop = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def set_down(self, down: bool, *, drop_sessions: bool = True) -> None:
        """Stop listening (connections are refused), or listen again on the same port.

        Going down also drops open sessions unless `drop_sessions` is False.
        """
        self._call(self._go_down(drop_sessions) if down else self._listen())

    @property
    def is_down(self) -> bool:
        """True while not listening (after set_down(True), or before start())."""
        return self._server is None

    @property
    def port(self) -> int:
        """The TCP port (the real one once started, even when constructed with 0)."""
        return self._port

    @property
    def url(self) -> str:
        """A SENDDOCK_SMTP_URL for this server, with the credentials if it has any (and, with
        TLS, verify=false: its certificate is a test one)."""
        auth = ""
        if self._user is not None and self._password is not None:
            auth = f"{quote(self._user, safe='')}:{quote(self._password, safe='')}@"
        tls = "none" if self.tls == "none" else f"{self.tls}&verify=false"
        return f"smtp://{auth}{self.host}:{self._port}?tls={tls}"

    # -- what arrived ------------------------------------------------------------------------

    def _dotted(self, rcpts: list[str]) -> None:
        with self._lock:
            self.dots_arrived.update(r.lower() for r in rcpts)

    def received(self) -> list[Received]:
        """A copy of everything accepted so far, in order of acceptance."""
        with self._lock:
            return list(self._received)

    def received_count(self) -> int:
        """How many Received records there are (cheaper than len(received()))."""
        with self._lock:
            return len(self._received)

    def count_by_rcpt(self) -> Counter[str]:
        """Accepted messages per lower-cased recipient."""
        with self._lock:
            return Counter(r.rcpt.lower() for r in self._received)

    def duplicates(self) -> dict[str, int]:
        """Recipients that received more than one message, with their counts."""
        return {rcpt: n for rcpt, n in self.count_by_rcpt().items() if n > 1}

    def delivered_once(self, expected: Iterable[str] | None = None) -> bool:
        """No recipient got two messages; with `expected`, exactly those got one each."""
        counts = self.count_by_rcpt()
        if expected is None:
            return all(n == 1 for n in counts.values())
        return counts == Counter({addr.lower(): 1 for addr in expected})

    def wait_for(self, n: int, timeout: float = 10.0) -> bool:
        """Block until at least `n` messages were received; False if `timeout` passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self._received) >= n, timeout)

    def clear(self) -> None:
        """Forget the received messages (attempt and connection counts stay)."""
        with self._lock:
            self._received.clear()

    def reset(self) -> None:
        """Forget messages, attempt counts (faults start over) and the connection count."""
        with self._lock:
            self._received.clear()
            self._attempts.clear()
            self._connections = 0

    @property
    def connections(self) -> int:
        """SMTP sessions opened so far (refused greetings included)."""
        with self._lock:
            return self._connections

    @property
    def attempts_by_rcpt(self) -> Counter[str]:
        """RCPT TO commands seen per lower-cased recipient (a copy)."""
        with self._lock:
            return Counter(self._attempts)

    # -- the loop thread ---------------------------------------------------------------------

    @staticmethod
    def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        loop.run_forever()

    def _call(self, coro: Coroutine[Any, Any, None], timeout: float = 30.0) -> None:
        """Run `coro` on the loop thread and wait for it."""
        loop = self._loop
        if loop is None or threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("catcher not running, or called from its own loop thread")
        asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    async def _listen(self) -> None:
        if self._server is not None:
            return
        loop = asyncio.get_running_loop()
        implicit = self._tls_context if self.tls == "tls" else None
        self._server = await loop.create_server(
            self._new_session, self.host, self._port, reuse_address=True, ssl=implicit
        )
        self._port = self._server.sockets[0].getsockname()[1]

    async def _go_down(self, drop_sessions: bool) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()  # the listening socket closes now; don't wait for sessions
        if drop_sessions:
            await self._drop_all()

    async def _drop_all(self) -> None:
        for session in list(self._live):
            if session.transport is not None:
                session.transport.close()
        for _ in range(3):  # let connection_lost callbacks run
            await asyncio.sleep(0)

    async def _shutdown(self) -> None:
        await self._go_down(drop_sessions=True)
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _new_session(self) -> asyncio.Protocol:
        with self._lock:
            self._connections += 1
        refusal = _reply(self.reject_connect, REJECT_CONNECT)
        if refusal is not None:
            return _Refuser(refusal)
        offer_auth = self._user is not None or bool(self.reject_auth)
        return _CatcherSMTP(
            self._live,
            self._handler,
            self._dotted,
            hostname=self.hostname,
            ident="senddock catcher",
            enable_SMTPUTF8=True,
            auth_require_tls=not offer_auth,
            authenticator=self._authenticate,
            tls_context=self._tls_context if self.tls == "starttls" else None,
            loop=self._loop,
        )

    # -- the hooks (called on the loop thread) -----------------------------------------------

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        refusal = _reply(self.reject_auth, REJECT_AUTH)
        if refusal is not None:
            return AuthResult(success=False, handled=False, message=refusal)
        ok = (
            isinstance(data, LoginPassword)
            and self._user is not None
            and self._password is not None
            and data.login == self._user.encode()
            and data.password == self._password.encode()
        )
        return AuthResult(success=ok, handled=False, auth_data=data if ok else None)

    def _on_mail(self, session: Session, envelope: Envelope, address: str, opts: list[str]) -> str:
        refusal = _reply(self.reject_mail_from, REJECT_MAIL_FROM)
        if refusal is not None:
            return refusal
        if self._user is not None and self.require_auth and not session.authenticated:
            return AUTH_REQUIRED
        envelope.mail_from = address
        envelope.mail_options.extend(opts)
        return "250 2.1.0 OK"

    async def _on_rcpt(self, envelope: _Envelope, address: str, opts: list[str]) -> str:
        key = address.lower()
        with self._lock:
            self._attempts[key] += 1
            attempt = self._attempts[key]
        fault = self.fault_for(address)
        if fault is not None and fault.stage == "rcpt" and fault.applies(attempt):
            if fault.kind != "stall_rcpt":
                return fault.reply_for(address)
            await asyncio.sleep(fault.seconds)
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(opts)
        envelope.faults.append((attempt, fault))
        return "250 2.1.5 OK"

    async def _on_data(self, server: SMTP, envelope: _Envelope) -> str:
        """Apply the worst data-stage fault among the recipients, else keep the message.

        Order: disconnect, then stall (its `then` decides), then 5xx, then 4xx, then accept.
        """
        active = [
            (rcpt, fault)
            for rcpt, (attempt, fault) in zip(envelope.rcpt_tos, envelope.faults, strict=True)
            if fault is not None and fault.stage == "data" and fault.applies(attempt)
        ]
        data = envelope.original_content or b""
        # aiosmtpd reads from an asyncio.StreamReader; what is still in its buffer after the
        # final dot arrived with it (a private attribute, so looked up defensively).
        if getattr(getattr(server, "_reader", None), "_buffer", None):
            with self._lock:
                self.dots_with_more += 1
        if self.on_dot is not None:
            self.on_dot(id(server), data)
        if self.dot_delay > 0:
            await asyncio.sleep(self.dot_delay)
        if any(fault.kind == "disconnect" for _, fault in active):
            _hang_up(server)
        stalls = [fault for _, fault in active if fault.kind == "stall"]
        if stalls:
            stall = max(stalls, key=lambda f: f.seconds)
            if stall.record_first:
                self._record(server, envelope, data)
            await asyncio.sleep(stall.seconds)
            if stall.then == "drop":
                _hang_up(server)
            if stall.record_first:
                return ACCEPTED
        for kind in ("reject_data", "defer_data"):
            for rcpt, fault in active:
                if fault.kind == kind:
                    return fault.reply_for(rcpt)
        if server.transport is None or server.transport.is_closing():
            # Dropped by set_down() while the data was in: a clean cut keeps nothing (a real
            # relay might keep it and lose only its reply; the `stall` fault with
            # record_first=True and then="drop" models that case).
            _hang_up(server)
        self._record(server, envelope, data)
        return ACCEPTED

    def _record(self, server: SMTP, envelope: Envelope, data: bytes) -> None:
        mid = message_id_of(data)
        now = time.time()
        mail_from = envelope.mail_from or ""
        tls = server.transport is not None and server.transport.get_extra_info("ssl_object")
        items = [
            Received(mail_from, rcpt, data, mid, now, tls=bool(tls)) for rcpt in envelope.rcpt_tos
        ]
        with self._changed:
            self._received.extend(items)
            self._changed.notify_all()


def _hang_up(server: SMTP) -> NoReturn:
    """Close the session's connection without replying and end its handler task."""
    if server.transport is not None:
        server.transport.close()
    raise asyncio.CancelledError
