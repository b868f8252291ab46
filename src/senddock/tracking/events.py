"""Opens and clicks written in batches (issue 37): the redirect never waits for Postgres.

A request adds its event to an in-process buffer and is answered at once; `EventWriter.run`
writes the buffer every INTERVAL seconds, or as soon as BATCH events wait, in one INSERT and
one commit (group commit; tracking/events.sql). While Postgres is away the buffer holds and the
writer retries (backing off up to 2 s): an event is late, not lost, while the `serve` process
lives. The buffer holds at most BOUND events (~200 bytes each: ~20 MB); past it a new event is
not kept (counted in `dropped`, logged), and the answer still goes. Lost for good: what the
buffer holds when the process dies (at most INTERVAL's worth with Postgres up), and what it
still holds after SHUTDOWN_SECONDS of retries at a clean stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import psycopg

from senddock.db import sql

log = logging.getLogger("senddock.web")

QUERIES = sql.load(__package__, "events.sql")

INTERVAL = 0.1
BATCH = 2_000
BOUND = 100_000
SHUTDOWN_SECONDS = 5.0
MAX_AGENT = 500  # characters of a User-Agent kept

Kind = Literal["open", "click"]


@dataclass(frozen=True)
class Event:
    """One open (link_id None) or click, as a request named it."""

    kind: Kind
    broadcast_id: int
    subscriber_id: int | None  # None: an anonymous campaign's
    link_id: int | None
    at: datetime
    user_agent: str
    machine: bool = False
    why: str | None = None


def _params(batch: list[Event]) -> dict[str, list[Any]]:
    return {
        "broadcast": [e.broadcast_id for e in batch],
        "subscriber": [e.subscriber_id for e in batch],
        "link": [e.link_id for e in batch],
        "kind": [e.kind for e in batch],
        "at": [e.at for e in batch],
        "agent": [e.user_agent[:MAX_AGENT].replace("\x00", "") for e in batch],
        "machine": [e.machine for e in batch],
        "why": [e.why for e in batch],
    }


class EventWriter:
    """The buffer and its writer (see the module). `add` runs on the event loop's thread,
    as `run` does, so the deque needs no lock."""

    def __init__(
        self, url: str, interval: float = INTERVAL, batch: int = BATCH, bound: int = BOUND
    ) -> None:
        self.url = url
        self.interval = interval
        self.batch = batch
        self.bound = bound
        self.buffer: deque[Event] = deque()
        self.written = 0
        self.dropped = 0
        self._full = asyncio.Event()
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._delay = 0.0

    def add(self, event: Event) -> bool:
        """Keep an event for the next batch; False (and counted) when the buffer is full."""
        if len(self.buffer) >= self.bound:
            if self.dropped % 1000 == 0:
                log.warning("tracking: %d events waiting; new ones are not kept", len(self.buffer))
            self.dropped += 1
            return False
        self.buffer.append(event)
        if len(self.buffer) >= self.batch:
            self._full.set()
        return True

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=5
            )
        return self._conn

    async def flush(self) -> bool:
        """Write what the buffer holds, a batch at a time; False when Postgres refused (the
        events stay, in order, for the next try)."""
        while self.buffer:
            n = min(self.batch, len(self.buffer))
            taken = [self.buffer.popleft() for _ in range(n)]
            try:
                conn = await self._connection()
                await conn.execute(QUERIES["insert"], _params(taken))
            except psycopg.OperationalError as exc:
                self.buffer.extendleft(reversed(taken))
                await self._close()
                log.warning(
                    "tracking: %d events wait for the database (%s)",
                    len(self.buffer),
                    " ".join(str(exc).split()) or type(exc).__name__,
                )
                return False
            except psycopg.Error:
                # Not the connection: this batch would fail again. Logged, never retried.
                log.exception("tracking: a batch of %d events could not be written", n)
                await self._close()
                continue
            self.written += n
        return True

    async def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
        self._conn = None

    async def run(self) -> None:
        """Write every INTERVAL, or at once when a batch is full; back off while refused."""
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._full.wait(), self.interval + self._delay)
                self._full.clear()
                if await self.flush():
                    self._delay = 0.0
                else:
                    self._delay = min(2.0, max(0.1, self._delay * 2))
        finally:
            await self._close()

    async def close(self, seconds: float = SHUTDOWN_SECONDS) -> None:
        """At shutdown: write what is left, retrying for at most `seconds`."""
        deadline = asyncio.get_running_loop().time() + seconds
        while self.buffer and asyncio.get_running_loop().time() < deadline:
            if not await self.flush():
                await asyncio.sleep(0.2)
        if self.buffer:
            log.error("tracking: %d events not written at shutdown", len(self.buffer))
        await self._close()
