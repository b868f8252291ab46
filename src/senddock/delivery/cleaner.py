"""Retention: delete the job rows of broadcasts that ended long ago, keeping their counts.

A broadcast finished or cancelled more than SENDDOCK_RETENTION_DAYS ago is first marked purged
(one transaction, with the row locked), its counts and last problem copied into
`broadcasts.final_counts`, and only then are its jobs deleted, a batch per transaction. The
counts every surface reads are counters that a delete does not touch (queue/counts.py), so they
are the same right before and after; `campaign status` reads the last problem from the frozen
copy; `campaign recipients` has nobody left to list.
Every worker runs this from its maintenance loop at a low rate; an advisory lock lets one
worker at a time do it.
"""

from __future__ import annotations

import time
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from senddock.queue.counts import counts_of_async, last_problem_async

AsyncConn = AsyncConnection[dict[str, Any]]

CLEANER_LOCK = (1397048900, 2)
# Jobs deleted per transaction, and transactions per pass: a pass stays well under a second.
BATCH = 5_000
BATCHES_PER_PASS = 10

# An ended broadcast past retention whose counts are not frozen yet, locked (a retry-failed or
# anything else touching it waits, or we skip it).
EXPIRED = """
SELECT id FROM broadcasts
WHERE status IN ('finished', 'cancelled') AND purged_at IS NULL
  AND finished_at < now() - make_interval(days => %(days)s::int)
ORDER BY finished_at
LIMIT 1
FOR UPDATE SKIP LOCKED
"""
FREEZE = "UPDATE broadcasts SET final_counts = %(counts)s, purged_at = now() WHERE id = %(b)s"
# One batch of jobs of a frozen broadcast, still ended (read with its row share-locked, so a
# retry-failed that would reopen it waits for this batch).
DELETE_BATCH = """
WITH b AS (
    SELECT id FROM broadcasts
    WHERE purged_at IS NOT NULL AND status IN ('finished', 'cancelled')
      AND EXISTS (SELECT 1 FROM broadcast_jobs j WHERE j.broadcast_id = broadcasts.id)
    ORDER BY purged_at
    LIMIT 1
    FOR SHARE SKIP LOCKED
), doomed AS (
    SELECT j.id FROM broadcast_jobs j, b WHERE j.broadcast_id = b.id LIMIT %(n)s
)
DELETE FROM broadcast_jobs j USING doomed WHERE j.id = doomed.id
"""


async def freeze_one(conn: AsyncConn, days: int) -> int | None:
    """Freeze the counts of one expired broadcast; its id, or None if there is none."""
    async with conn.transaction():
        row = await (await conn.execute(EXPIRED, {"days": days})).fetchone()
        if row is None:
            return None
        bid = int(row["id"])
        # The counters (queue/counts.py) outlive the jobs: the frozen copy is a record of what
        # they said at the purge, with the last problem, whose job goes with the purge.
        counts: dict[str, Any] = (await counts_of_async(conn, [bid]))[bid].as_dict()
        counts["last_problem"] = await last_problem_async(conn, bid)
        await conn.execute(FREEZE, {"b": bid, "counts": Jsonb(counts)})
        return int(row["id"])


async def delete_batch(conn: AsyncConn, n: int = BATCH) -> int:
    """Delete up to n jobs of frozen broadcasts; how many."""
    async with conn.transaction():
        cur = await conn.execute(DELETE_BATCH, {"n": n})
        return cur.rowcount


async def clean(conn: AsyncConn, days: int, batches: int = BATCHES_PER_PASS) -> int:
    """One pass: freeze what expired, delete up to `batches` batches of jobs; jobs deleted.

    Does nothing while another worker holds the cleaner lock, or if `days` is 0 (keep forever).
    """
    if days <= 0:
        return 0
    cur = await conn.execute("SELECT pg_try_advisory_lock(%s, %s) AS ok", CLEANER_LOCK)
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
        await conn.execute("SELECT pg_advisory_unlock(%s, %s)", CLEANER_LOCK)


class Cleaner:
    """Runs `clean` at most once per `every` seconds (a worker's maintenance loop calls it)."""

    def __init__(self, days: int, every: float = 60.0) -> None:
        self.days = days
        self.every = every
        self._next = 0.0

    async def maybe_clean(self, conn: AsyncConn) -> int:
        now = time.monotonic()
        if now < self._next:
            return 0
        deleted = await clean(conn, self.days)
        # Behind (a full pass deleted something): come back sooner.
        self._next = now + (self.every / 10 if deleted >= BATCH * BATCHES_PER_PASS else self.every)
        return deleted
