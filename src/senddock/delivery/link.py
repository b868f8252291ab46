"""A database connection that comes back after a fault (server restart, killed backend)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from senddock.queue import AsyncConn

log = logging.getLogger("senddock.worker")

T = TypeVar("T")


async def open_conn(url: str) -> AsyncConn:
    return await AsyncConnection.connect(
        url, autocommit=True, row_factory=dict_row, connect_timeout=10
    )


class Stopped(Exception):
    """The worker is stopping and this database call is not worth waiting for."""


class Link:
    """One database connection that comes back after a fault (server restart, killed backend)."""

    def __init__(self, url: str, stopping: Callable[[], bool]) -> None:
        self.url = url
        self._conn: AsyncConn | None = None
        self._stopping = stopping

    async def conn(self, give_up_when_stopping: bool = False) -> AsyncConn:
        """The open connection, reconnecting with backoff for as long as it takes."""
        delay = 0.05
        while self._conn is None or self._conn.closed:
            if give_up_when_stopping and self._stopping():
                raise Stopped
            try:
                self._conn = await open_conn(self.url)
            except psycopg.OperationalError as exc:
                log.warning("database unreachable (%s); retrying in %.1fs", one_line(exc), delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        return self._conn

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
        self._conn = None

    async def retrying(
        self, what: Callable[[AsyncConn], Awaitable[T]], give_up_when_stopping: bool = False
    ) -> T:
        """Run `what` until it completes, reconnecting after connection faults.

        Only for statements that are safe to run twice (reads, idempotent writes).
        """
        delay = 0.05
        while True:
            conn = await self.conn(give_up_when_stopping)
            try:
                return await what(conn)
            except psycopg.OperationalError as exc:
                log.warning("database fault (%s); retrying", one_line(exc))
                await self.close()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
