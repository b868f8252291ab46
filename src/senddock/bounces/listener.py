"""`senddock bounces serve`: the bounce domain's MX, an SMTP listener (aiosmtpd).

It takes mail only for our return paths (`b+…@` the bounce domain, and `b@` itself for
feedback loops), answers 250 only once the message is committed (bounces.store), and 451
when it cannot be (the database is down: the relay keeps it and tries again), so nothing is
lost between the relay and Postgres. A message over the size cap gets 552 before it is kept
(aiosmtpd counts it while it arrives); each client address holds at most `per_client`
connections at once (421 beyond), and an idle session ends after `timeout` seconds.

aiosmtpd's `SMTP._handle_client` is taken over to refuse a connection before its greeting:
pinned in pyproject.toml, tested in tests/test_bounce_listener.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from senddock.bounces.parse import MAX_BYTES
from senddock.bounces.store import Received
from senddock.bounces.verp import ReturnPath

log = logging.getLogger("senddock.bounces")

Store = Callable[[bytes, str], Received]


class BounceHandler:
    """aiosmtpd hooks: who may be written to, and what happens to a message."""

    def __init__(self, return_path: ReturnPath, store: Store, max_recipients: int = 10) -> None:
        self.return_path = return_path
        self.store = store
        self.max_recipients = max_recipients

    def ours(self, address: str) -> bool:
        local, at, domain = address.rpartition("@")
        if not at or domain.lower() != self.return_path.domain:
            return False
        prefix = self.return_path.prefix.lower()
        return local.lower() == prefix or local.lower().startswith(prefix + "+")

    async def handle_RCPT(  # aiosmtpd's hook names
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
        ids = []
        try:
            for address in envelope.rcpt_tos:
                received = await asyncio.to_thread(self.store, raw, address)
                ids.append(f"{received.id}{'' if received.new else ' (seen before)'}")
        except Exception as exc:  # the database, mostly: the relay keeps it and retries
            log.warning("could not record a bounce from %s: %s", session.peer, exc)
            return "451 4.3.0 cannot record it now, try again later"
        return f"250 2.0.0 recorded as bounce {', '.join(ids)}"


class LimitedSMTP(SMTP):
    """aiosmtpd's SMTP with at most `per_client` connections at once from one address."""

    def __init__(self, handler: Any, per_client: int, open_: Counter[str], **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self.per_client = per_client
        self.open = open_
        self.client = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if peer else "?"
        self.open[self.client] += 1
        super().connection_made(transport)

    def connection_lost(self, error: Exception | None) -> None:
        self.open[self.client] -= 1
        if self.open[self.client] <= 0:
            del self.open[self.client]
        super().connection_lost(error)

    async def _handle_client(self) -> None:
        if self.open[self.client] > self.per_client:
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
