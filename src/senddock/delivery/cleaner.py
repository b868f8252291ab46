"""Retention: delete the job rows of broadcasts that ended long ago, keeping their counts.

A broadcast finished or cancelled more than SENDDOCK_RETENTION_DAYS ago is first marked purged
(one transaction, with the row locked), its counts and last problem copied into
`broadcasts.final_counts`, and only then are its jobs deleted, a batch per transaction (the
statements are the queue layer's: senddock/queue/jobs.sql, expired, freeze, delete_batch). The
counts every surface reads are counters that a delete does not touch (queue/counts.py), so they
are the same right before and after; `campaign status` reads the last problem from the frozen
copy; `campaign recipients` has nobody left to list. Every worker runs this as a maintenance
service (delivery/maintainer.py) at a low rate; an advisory lock lets one worker at a time do it.

The same pass purges the bytes of returned messages and provider events older than
SENDDOCK_BOUNCE_RAW_DAYS (cleaner.sql, purge_raw): their findings and effects stay.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from senddock import queue
from senddock.db import sql
from senddock.delivery.maintainer import Service
from senddock.queue.counts import counts_of_async, last_problem_async

AsyncConn = AsyncConnection[dict[str, Any]]

CLEANER_LOCK = (1397048900, 2)
QUERIES = sql.load(__package__, "cleaner.sql")
# Jobs deleted per transaction, and transactions per pass: a pass stays well under a second.
BATCH = 5_000
BATCHES_PER_PASS = 10
RAW_BATCH = 1_000  # returned messages whose bytes are purged per transaction


async def freeze_one(conn: AsyncConn, days: int) -> int | None:
    """Freeze the counts of one expired broadcast; its id, or None if there is none."""
    async with conn.transaction():
        bid = await queue.lock_expired(conn, days)
        if bid is None:
            return None
        # The counters (queue/counts.py) outlive the jobs: the frozen copy is a record of what
        # they said at the purge, with the last problem, whose job goes with the purge.
        counts: dict[str, Any] = (await counts_of_async(conn, [bid]))[bid].as_dict()
        problem = await last_problem_async(conn, bid)
        counts["last_problem"] = None if problem is None else problem.as_dict()
        await queue.freeze(conn, bid, counts)
        return bid


async def delete_batch(conn: AsyncConn, n: int = BATCH) -> int:
    """Delete up to n jobs of frozen broadcasts; how many."""
    return await queue.delete_batch(conn, n)


async def purge_raw(conn: AsyncConn, days: int, n: int = RAW_BATCH) -> int:
    """Drop the bytes of up to n returned messages older than `days`; how many."""
    async with conn.transaction():
        cur = await conn.execute(QUERIES["purge_raw"], {"days": days, "n": n})
        return cur.rowcount


async def clean(
    conn: AsyncConn, days: int, batches: int = BATCHES_PER_PASS, raw_days: int = 0
) -> int:
    """One pass: freeze what expired, delete up to `batches` batches of jobs, purge returned
    messages' bytes past `raw_days`; jobs deleted.

    Does nothing while another worker holds the cleaner lock; a 0 keeps forever.
    """
    if days <= 0 and raw_days <= 0:
        return 0
    cur = await conn.execute(QUERIES["try_lock"], CLEANER_LOCK)
    got = await cur.fetchone()
    if not got or not got["ok"]:
        return 0
    try:
        for _ in range(batches if raw_days > 0 else 0):
            if await purge_raw(conn, raw_days) < RAW_BATCH:
                break
        deleted = 0
        if days <= 0:
            return 0
        while await freeze_one(conn, days) is not None:
            pass
        for _ in range(batches):
            n = await delete_batch(conn)
            deleted += n
            if n == 0:
                break
        return deleted
    finally:
        await conn.execute(QUERIES["unlock"], CLEANER_LOCK)


class Cleaner(Service):
    """The maintenance service of retention: a `clean` pass every `every` seconds."""

    name = "cleaner"

    def __init__(self, days: int, every: float = 60.0, raw_days: int = 0) -> None:
        self.days = days
        self.period = every
        self.raw_days = raw_days

    async def run_once(self, conn: AsyncConn) -> float | None:
        deleted = await clean(conn, self.days, raw_days=self.raw_days)
        # Behind (a full pass deleted something): come back sooner.
        return self.period / 10 if deleted >= BATCH * BATCHES_PER_PASS else None
