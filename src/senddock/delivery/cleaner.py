"""Retention: delete the job rows of broadcasts that ended long ago, keeping their counts.

A broadcast finished or cancelled more than SENDDOCK_RETENTION_DAYS ago is first marked purged
(one transaction, with the row locked), its counts and last problem copied into
`broadcasts.final_counts`, and only then are its jobs deleted, a batch per transaction (the
statements are the queue layer's: senddock/queue/jobs.sql, expired, freeze, delete_batch). The
counts every surface reads are counters that a delete does not touch (queue/counts.py), so they
are the same right before and after; `campaign status` reads the last problem from the frozen
copy; `campaign recipients` has nobody left to list. Every worker runs this as a maintenance
service (delivery/maintainer.py) at a low rate; an advisory lock lets one worker at a time do it.
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


async def freeze_one(conn: AsyncConn, days: int) -> int | None:
    """Freeze the counts of one expired broadcast; its id, or None if there is none."""
    async with conn.transaction():
        bid = await queue.lock_expired(conn, days)
        if bid is None:
            return None
        # The counters (queue/counts.py) outlive the jobs: the frozen copy is a record of what
        # they said at the purge, with the last problem, whose job goes with the purge.
        counts: dict[str, Any] = (await counts_of_async(conn, [bid]))[bid].as_dict()
        counts["last_problem"] = await last_problem_async(conn, bid)
        await queue.freeze(conn, bid, counts)
        return bid


async def delete_batch(conn: AsyncConn, n: int = BATCH) -> int:
    """Delete up to n jobs of frozen broadcasts; how many."""
    return await queue.delete_batch(conn, n)


async def clean(conn: AsyncConn, days: int, batches: int = BATCHES_PER_PASS) -> int:
    """One pass: freeze what expired, delete up to `batches` batches of jobs; jobs deleted.

    Does nothing while another worker holds the cleaner lock, or if `days` is 0 (keep forever).
    """
    if days <= 0:
        return 0
    cur = await conn.execute(QUERIES["try_lock"], CLEANER_LOCK)
    got = await cur.fetchone()
    if not got or not got["ok"]:
        return 0
    try:
        while await freeze_one(conn, days) is not None:
            pass
        deleted = 0
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

    def __init__(self, days: int, every: float = 60.0) -> None:
        self.days = days
        self.period = every

    async def run_once(self, conn: AsyncConn) -> float | None:
        deleted = await clean(conn, self.days)
        # Behind (a full pass deleted something): come back sooner.
        return self.period / 10 if deleted >= BATCH * BATCHES_PER_PASS else None
