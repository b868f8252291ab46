"""Opens and clicks written in batches (issue 37): the redirect never waits for Postgres.

A request adds its event to an in-process buffer and is answered at once; `EventWriter.run`
writes the buffer every INTERVAL seconds, or as soon as BATCH events wait, in one INSERT and
one commit (group commit; tracking/events.sql). While Postgres is away the buffer holds and the
writer retries (backing off up to 2 s): an event is late, not lost, while the `serve` process
lives. The buffer holds at most BOUND events (~200 bytes each: ~20 MB); past it a new event is
not kept (counted in `dropped`, logged), and the answer still goes. Lost for good: what the
buffer holds when the process dies (at most INTERVAL's worth with Postgres up), and what it
still holds after SHUTDOWN_SECONDS of retries at a clean stop.

Human or machine (item 3 of the issue). What one request shows is judged as it is answered
(web/tracking.py: a HEAD request, a known proxy's agent or address, too many requests). What
needs other rows is judged here, in the batch's own transaction right after its insert
(events.sql judge_*), so the redirect never waits on a query and no reader of the figures
sees a batch unjudged; it costs the batch three indexed statements, not one per request:

- prefetch: an open or click less than PREFETCH seconds after its job's delivery
  (broadcast_jobs.sent_at) is a machine's ("opened 2.1 s after delivery"). A person rarely
  opens a message within 10 s of its arrival; proxies and scanners fetch on arrival.
- scan: SCAN_LINKS or more distinct links of one message clicked by one job within SCAN
  seconds: every click of that burst ("4 links within 1.2 s"). Three, not two: a person may
  well follow two links quickly; nobody reads three pages in five seconds.
- trap: a request for the hidden trap link (messages/tracking.py) is a machine's, and so is
  each click of that job within TRAP seconds of it ("followed the hidden trap link").

Evidence is only ever added: an event once judged a machine's keeps its first why; a later
batch may turn an earlier human event into a machine one (the burst's first clicks, a click
before the trap), never the reverse. None applies to an anonymous campaign's events (they name
no job); the judgement is only as good as the clocks (serve's for the event, Postgres's for
sent_at: one host's, or NTP's).
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
PREFETCH = 10.0  # seconds after delivery in which an open or click is a machine's
SCAN = 5.0  # seconds in which SCAN_LINKS distinct links clicked by one job are a scanner's
SCAN_LINKS = 3
TRAP = 10.0  # seconds around a trap-link request in which that job's clicks are a machine's

Kind = Literal["open", "click", "trap"]


@dataclass(frozen=True)
class Event:
    """One open (link_id None), click, or request for the hidden trap link (link_id None),
    as a request named it."""

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
        self,
        url: str,
        interval: float = INTERVAL,
        batch: int = BATCH,
        bound: int = BOUND,
        prefetch: float = PREFETCH,
    ) -> None:
        self.url = url
        self.prefetch = prefetch
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
                await self._write(conn, taken)
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

    async def _write(self, conn: psycopg.AsyncConnection[Any], batch: list[Event]) -> None:
        """Insert a batch and judge it by the evidence in other rows, in one transaction."""
        async with conn.transaction():
            cur = await conn.execute(QUERIES["insert"], _params(batch))
            ids = [row[0] for row in await cur.fetchall()]
            if not ids:
                return
            windows = {"ids": ids, "prefetch": self.prefetch, "scan": SCAN, "links": SCAN_LINKS}
            await conn.execute(QUERIES["judge_prefetch"], windows)
            await conn.execute(QUERIES["judge_scan"], windows)
            await conn.execute(QUERIES["judge_trap"], {"ids": ids, "trap": TRAP})

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
