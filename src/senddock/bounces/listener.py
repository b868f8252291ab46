"""`senddock bounces serve`: the bounce domain's MX, an SMTP listener (aiosmtpd).

It takes mail only for our return paths (`b+…@` the bounce domain, and `b@` itself for
feedback loops), answers 250 only once the message is committed (bounces.store), and 451
when it cannot be (the database is down: the relay keeps it and tries again), so nothing is
lost between the relay and Postgres. What one client may make it do is bounded:

- a message over the size cap gets 552 before it is kept (aiosmtpd counts it as it arrives);
- a transaction takes at most `max_recipients` recipients (452 past them) and its message is
  kept and read once, whatever their number; a message's findings are capped (bounces.store);
- each client address holds at most `per_client` connections at once (421 to the one past
  them, decided when it connects), and sends at most `per_minute` messages a minute (451 at
  MAIL past them: a real relay tries again later); an idle session ends after `timeout` s.

aiosmtpd's `SMTP._handle_client` is taken over to refuse a connection before its greeting:
pinned in pyproject.toml, tested in tests/test_bounce_listener.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from senddock.bounces.parse import MAX_BYTES
from senddock.bounces.store import Received
from senddock.bounces.verp import ReturnPath

log = logging.getLogger("senddock.bounces")

Store = Callable[[bytes, list[str]], Received]
MINUTE = 60.0


class BounceHandler:
    """aiosmtpd hooks: who may be written to, and what happens to a message."""

    def __init__(
        self,
        return_path: ReturnPath,
        store: Store,
        max_recipients: int = 10,
        per_minute: int = 300,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.return_path = return_path
        self.store = store
        self.max_recipients = max_recipients
        self.per_minute = per_minute
        self.clock = clock
        # The times of each client's messages in the last minute (at most per_minute each).
        self.recent: dict[str, deque[float]] = {}
        self.pruned_at = clock()

    def ours(self, address: str) -> bool:
        local, at, domain = address.rpartition("@")
        if not at or domain.lower() != self.return_path.domain:
            return False
        prefix = self.return_path.prefix.lower()
        return local.lower() == prefix or local.lower().startswith(prefix + "+")

    def _sent_lately(self, client: str) -> deque[float]:
        now = self.clock()
        if now - self.pruned_at > MINUTE:  # forget the clients quiet for a minute, once a minute
            self.pruned_at = now
            quiet = [c for c, times in self.recent.items() if not times or times[-1] < now - MINUTE]
            for c in quiet:
                del self.recent[c]
        times = self.recent.setdefault(client, deque())
        while times and times[0] < now - MINUTE:
            times.popleft()
        return times

    async def handle_MAIL(  # aiosmtpd's hook names
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        if len(self._sent_lately(_client(session))) >= self.per_minute:
            return "451 4.7.1 too many messages from your address, try again later"
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 OK"

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        if not self.ours(address):
            return "550 5.1.1 not a bounce address here"
        if len(envelope.rcpt_tos) >= self.max_recipients:
            return "452 4.5.3 too many recipients"
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or envelope.content
        if not isinstance(raw, bytes):
            raw = str(raw or "").encode("utf-8", "surrogateescape")
        self._sent_lately(_client(session)).append(self.clock())
        try:  # once, for every recipient of the transaction
            received = await asyncio.to_thread(self.store, raw, list(envelope.rcpt_tos))
        except Exception as exc:  # the database, mostly: the relay keeps it and retries
            log.warning("could not record a bounce from %s: %s", session.peer, exc)
            return "451 4.3.0 cannot record it now, try again later"
        seen = "" if received.new else " (seen before)"
        return f"250 2.0.0 recorded as bounce {received.id}{seen}"


def _client(session: Session) -> str:
    peer = session.peer
    return str(peer[0]) if isinstance(peer, tuple) and peer else str(peer or "?")


class LimitedSMTP(SMTP):
    """aiosmtpd's SMTP with at most `per_client` connections at once from one address."""

    def __init__(self, handler: Any, per_client: int, open_: Counter[str], **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self.per_client = per_client
        self.open = open_
        self.client = "?"
        self.admitted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.transport is None:  # not again at STARTTLS
            peer = transport.get_extra_info("peername")
            self.client = str(peer[0]) if peer else "?"
            # Judged here, as it connects: connections that arrive together are each counted
            # before any of them is greeted, so a count read at the greeting refuses them all.
            self.admitted = self.open[self.client] < self.per_client
            if self.admitted:
                self.open[self.client] += 1
        super().connection_made(transport)

    def connection_lost(self, error: Exception | None) -> None:
        if self.admitted:
            self.admitted = False
            self.open[self.client] -= 1
            if self.open[self.client] <= 0:
                del self.open[self.client]
        super().connection_lost(error)

    async def _handle_client(self) -> None:
        if not self.admitted:
            await self.push("421 4.7.0 too many connections from your address, try later")
            if self.transport is not None:
                self.transport.close()
            return
        await super()._handle_client()


class BounceListener(Controller):
    """The listener, in a thread of its own (aiosmtpd's Controller)."""

    def __init__(
        self,
        handler: BounceHandler,
        hostname: str,
        port: int,
        *,
        per_client: int = 10,
        max_bytes: int = MAX_BYTES,
        timeout: float = 60,
    ) -> None:
        self.per_client = per_client
        self.open: Counter[str] = Counter()
        super().__init__(
            handler,
            hostname=hostname,
            port=port,
            data_size_limit=max_bytes,
            timeout=timeout,
            enable_SMTPUTF8=True,
            ident="SendDock bounces",
        )

    def factory(self) -> SMTP:
        return LimitedSMTP(self.handler, self.per_client, self.open, **self.SMTP_kwargs)
