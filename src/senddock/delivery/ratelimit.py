"""Rate limits per SMTP server, global across every worker process.

The state is a row per server in Postgres (migration 0007): fixed windows of one second, one
minute and one hour, each with the permits it has handed out. A process takes a small batch of
permits with ONE statement that grants min(asked, left in every window) under the row's lock,
keeps them in memory and hands them out to its senders, so there is no round trip per message.
A permit is good only inside the window it was counted in (minus a small guard, so the message
it pays for reaches the relay before that window ends); an unused one dies with its window:
we may under-send, never over-send. With the database unreachable no permit is granted and
senders wait: nothing is ever sent unmetered.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

from senddock.config import SmtpTarget
from senddock.db import sql
from senddock.delivery.link import Link, Stopped
from senddock.queue import AsyncConn

# (window kind, its length in seconds) for the three windows of a server's row.
WINDOWS = (("second", 1.0), ("minute", 60.0), ("hour", 3600.0))
# A limit nobody reaches: what an unlimited window is checked against.
UNLIMITED = 2**62
# Permits stop being handed out this long before their window ends: the message a permit pays
# for (MAIL FROM ... final dot) must reach the relay inside the window that counted it.
GUARD = 0.025
# A batch is about 1/20 of the tightest limit per second, so the permits one process may hold
# unused when a window ends stay small next to the limit; never more than this many.
MAX_BATCH = 50
# A permit waited for longer than this: the SMTP session may have gone stale meanwhile.
LONG_WAIT = 5.0

QUERIES = sql.load(__package__, "ratelimit.sql")


@dataclass(frozen=True)
class Permit:
    """Leave to start one message on a server: good until `expires` (monotonic)."""

    grant: int  # which grant of its limiter it came from
    expires: float

    def valid(self) -> bool:
        return time.monotonic() < self.expires


UNMETERED = Permit(0, float("inf"))


@dataclass(frozen=True)
class Grant:
    """What one acquire gave: the permits, and per window what is left and for how long."""

    granted: int
    left: dict[str, int]
    ends_in: dict[str, float]


def limits_of(target: SmtpTarget) -> dict[str, int | None]:
    """The server's limit per window kind (None: unlimited)."""
    return {"second": target.per_second, "minute": target.per_minute, "hour": target.per_hour}


def batch_size(target: SmtpTarget) -> int:
    """About 1/20 of the tightest limit per second, at least 1, at most MAX_BATCH."""
    rates = [n / length for (kind, length) in WINDOWS if (n := limits_of(target)[kind])]
    if not rates:
        return MAX_BATCH
    return max(1, min(MAX_BATCH, int(min(rates) / 20)))


async def acquire(conn: AsyncConn, target: SmtpTarget, asked: int) -> Grant:
    """Take up to `asked` permits of `target` for this process (one statement, autocommit)."""
    limits = limits_of(target)
    params: dict[str, Any] = {"server": target.name, "asked": asked}
    params.update({k: UNLIMITED if n is None else n for k, n in limits.items()})
    cur = await conn.execute(QUERIES["acquire"], params)
    row = await cur.fetchone()
    if row is None:  # the server's first use anywhere
        await conn.execute(QUERIES["ensure"], params)
        cur = await conn.execute(QUERIES["acquire"], params)
        row = await cur.fetchone()
        assert row is not None, "ensure made the row"
    left = {k: (UNLIMITED if n is None else n - int(row[f"{k}_used"])) for k, n in limits.items()}
    ends = {k: float(row[f"{k}_ends"]) for k, _ in WINDOWS}
    return Grant(int(row["granted"]), left, ends)


class RateLimiter:
    """One server's permits in this process; every sender of the process takes from it."""

    def __init__(self, target: SmtpTarget, db: Link, stopping: asyncio.Event) -> None:
        self.target = target
        self.db = db
        self.stopping = stopping
        self.batch = batch_size(target)
        self.limited = [k for k, n in limits_of(target).items() if n is not None]
        self._left = 0
        self._expires = 0.0  # monotonic: permits in hand are void from then on
        self._window_end = 0.0  # monotonic: when the shortest limited window ends
        self._not_before = 0.0  # monotonic: asking earlier is pointless (windows exhausted)
        self._refill = asyncio.Lock()
        self._grant = 0  # which grant the permits in hand came from
        self.acquired = 0  # statements run, for tests and logs

    async def take(self) -> Permit | None:
        """Wait for one permit; None if the worker started stopping first."""
        if not self.limited:
            return UNMETERED
        while not self.stopping.is_set():
            if permit := self._take_local():
                return permit
            async with self._refill:
                if permit := self._take_local():
                    return permit
                await self._ask()
        return None

    def take_now(self) -> Permit | None:
        """A permit if one is in hand now, without waiting or asking the database."""
        return self._take_local() if self.limited else UNMETERED

    def give_back(self, permit: Permit) -> None:
        """A permit not used (its job went back) rejoins its own grant while that is in hand;
        never a later grant, whose windows counted only their own permits."""
        if self.limited and permit.grant == self._grant:
            self._left += 1

    def _take_local(self) -> Permit | None:
        if self._left > 0 and time.monotonic() < self._expires:
            self._left -= 1
            return Permit(self._grant, self._expires)
        return None

    async def _ask(self) -> None:
        """Refill from the database once, or wait until a window with permits left begins."""
        until = self._not_before
        now = time.monotonic()
        if self._expires <= now < self._window_end:
            until = max(until, self._window_end)  # in the guard: new permits would be void
        if until > now and await self._stopped_within(until - now):
            return
        asked_at = time.monotonic()  # before the statement: any latency shortens the permits
        # Retried after a fault: a grant whose reply was lost is simply never used (under-send).
        try:
            grant = await self.db.retrying(
                lambda c: acquire(c, self.target, self.batch), give_up_when_stopping=True
            )
        except Stopped:
            return
        self.acquired += 1
        # Permits die with the shortest limited window (less the guard).
        self._window_end = asked_at + min(grant.ends_in[k] for k in self.limited)
        self._expires = self._window_end - GUARD
        self._left = grant.granted
        self._grant += 1
        # Until every exhausted window has ended, asking again would get nothing.
        full = [grant.ends_in[k] for k in self.limited if grant.left[k] <= 0]
        self._not_before = asked_at + max(full) if full else 0.0

    async def _stopped_within(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)
        return self.stopping.is_set()
