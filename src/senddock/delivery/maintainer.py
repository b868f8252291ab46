"""A process's background duties, as services of one shape: a name, a period, one pass.

A service does one pass on a database connection of its own (`run_once`) and says how long
until its next (None: its period). One `Maintainer` runs every service of a process, each in a
task of its own, through one helper (`_keep`) that reconnects with backoff after a connection
fault; anything else a pass raises ends the maintainer, and so the worker that runs it
(delivery/worker.py `_until_done`): a duty that cannot do its work must not look alive.

A `Service` runs its pass on the event loop with an async connection; a `ThreadService` runs
its pass in a thread with a synchronous one (the campaigns' code is synchronous) and wakes the
loop's side only through `call_in_loop`.

The services: the worker's heartbeat, listener and finisher (delivery/worker.py), the rescuer
(delivery/rescuer.py), retention (delivery/cleaner.py), the scheduler, the enqueuer and the
imports (senddock/runtime.py, which composes them for `senddock worker` and `senddock serve`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.rows import dict_row

from senddock.delivery.link import Link, one_line
from senddock.queue import AsyncConn

log = logging.getLogger("senddock.worker")

Conn = psycopg.Connection[dict[str, Any]]

# After a connection fault a service waits this long before its next try, doubling up to
# MAX_BACKOFF (and never more than its period).
FIRST_BACKOFF = 0.05
MAX_BACKOFF = 5.0


class Service:
    """A duty done on the event loop: one pass on an async connection."""

    name = "service"
    period = 5.0

    async def run_once(self, conn: AsyncConn) -> float | None:
        """One pass; seconds until the next (None: the period)."""
        raise NotImplementedError

    def reconnected(self) -> None:
        """Its connection came back after a fault (the rescuer grants peers a grace)."""


class ThreadService:
    """A duty done in a thread: one pass on a synchronous connection."""

    name = "service"
    period = 5.0
    _loop: asyncio.AbstractEventLoop | None = None

    def run_once(self, conn: Conn) -> float | None:
        """One pass (in a thread); seconds until the next (None: the period)."""
        raise NotImplementedError

    def reconnected(self) -> None:
        """Its connection came back after a fault."""

    def call_in_loop(self, fn: Callable[[], object]) -> None:
        """Call `fn` on the maintainer's event loop (an asyncio.Event is not thread-safe)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(fn)


Duty = Service | ThreadService


def _connect(url: str) -> Conn:
    return psycopg.connect(url, autocommit=True, row_factory=dict_row, connect_timeout=10)


class _ThreadLink:
    """A synchronous connection for a ThreadService, opened and closed in a thread."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: Conn | None = None

    async def conn(self) -> Conn:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        conn: Conn = await asyncio.to_thread(_connect, self.url)
        self._conn = conn
        return conn

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._conn.close)
        self._conn = None


async def _keep(duty: Duty, link: Link | _ThreadLink) -> None:
    """Run `duty` pass after pass, forever; after a connection fault, reconnect with backoff."""
    cut_off = False
    delay = FIRST_BACKOFF
    while True:
        try:
            if isinstance(duty, ThreadService):
                assert isinstance(link, _ThreadLink)
                sync_conn = await link.conn()
                if cut_off:
                    duty.reconnected()
                    cut_off = False
                wait = await asyncio.to_thread(duty.run_once, sync_conn)
            else:
                assert isinstance(link, Link)
                conn = await link.conn()
                if cut_off:
                    duty.reconnected()
                    cut_off = False
                wait = await duty.run_once(conn)
            delay = FIRST_BACKOFF
        except psycopg.OperationalError as exc:
            log.warning("%s failed (%s)", duty.name, one_line(exc))
            await link.close()
            cut_off = True
            wait = min(delay, duty.period)
            delay = min(delay * 2, MAX_BACKOFF)
        await asyncio.sleep(duty.period if wait is None else wait)


class Maintainer:
    """Runs a process's services until cancelled, each on its own connection."""

    def __init__(self, url: str, stopping: Callable[[], bool]) -> None:
        self.url = url
        self.stopping = stopping
        self._duties: list[tuple[Duty, Link | _ThreadLink]] = []
        self._own: list[Link | _ThreadLink] = []  # the links made here, closed at the end

    def add(self, duty: Duty, link: Link | None = None) -> None:
        """Run `duty` too; on `link` if given (the heartbeat shares the worker's)."""
        made: Link | _ThreadLink | None = None
        if isinstance(duty, ThreadService):
            made = _ThreadLink(self.url)
        elif link is None:
            made = Link(self.url, self.stopping)
        if made is not None:
            self._own.append(made)
        used = made if made is not None else link
        assert used is not None
        self._duties.append((duty, used))

    @property
    def names(self) -> list[str]:
        return [duty.name for duty, _ in self._duties]

    async def run(self) -> None:
        """Run every service; return (or raise) when one ends, cancelling the others."""
        loop = asyncio.get_running_loop()
        tasks = []
        for duty, link in self._duties:
            if isinstance(duty, ThreadService):
                duty._loop = loop
            tasks.append(asyncio.create_task(_keep(duty, link), name=duty.name))
        if not tasks:
            return
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for link in self._own:
                await link.close()
