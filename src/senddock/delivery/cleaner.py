"""Retention: delete the job rows of broadcasts that ended long ago, keeping their counts.

A broadcast finished or cancelled more than SENDDOCK_RETENTION_DAYS ago first has its final
counts frozen into `broadcasts.final_counts` (one transaction, with the row locked), and only
then are its jobs deleted, a batch per transaction (the statements are the queue layer's:
senddock/queue/jobs.sql, expired, freeze, delete_batch). `campaign status` reads the frozen
counts from then on, so it stays exact (invariant 8); `campaign recipients` has nobody left to
list. Every worker runs this as a maintenance service (delivery/maintainer.py) at a low rate;
an advisory lock lets one worker at a time do it.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from senddock import queue
from senddock.delivery.maintainer import Service

AsyncConn = AsyncConnection[dict[str, Any]]

CLEANER_LOCK = (1397048900, 2)
# Jobs deleted per transaction, and transactions per pass: a pass stays well under a second.
BATCH = 5_000
BATCHES_PER_PASS = 10

# The exact counts of one broadcast, from the index that carries status and failure.
FINAL_COUNTS = """
SELECT jsonb_build_object(
    'total', count(*),
    'pending', count(*) FILTER (WHERE status = 'pending'),
    'sending', count(*) FILTER (WHERE status = 'sending'),
    'retry', count(*) FILTER (WHERE status = 'retry'),
    'sent', count(*) FILTER (WHERE status = 'sent'),
    'failed', count(*) FILTER (WHERE status = 'failed'),
    'cancelled', count(*) FILTER (WHERE status = 'cancelled'),
    'bounced', count(*) FILTER (WHERE status = 'failed' AND failure = 'bounced'),
    'suppressed', count(*) FILTER (WHERE status = 'failed' AND failure = 'suppressed'),
    'exhausted', count(*) FILTER (WHERE status = 'failed' AND failure = 'exhausted'),
    'rejected', count(*) FILTER (WHERE status = 'failed' AND failure = 'rejected'),
    -- What `campaign status` shows as its last problem, kept with the counts it outlives.
    'last_problem', (SELECT jsonb_build_object('email', p.email, 'status', p.status,
                                               'last_stage', p.last_stage,
                                               'last_code', p.last_code,
                                               'last_enhanced', p.last_enhanced,
                                               'last_reply', p.last_reply)
                     FROM broadcast_jobs p
                     WHERE p.broadcast_id = %(b)s AND p.status IN ('retry', 'failed')
                       AND p.last_reply IS NOT NULL
                     ORDER BY p.updated_at DESC LIMIT 1)
) AS counts
FROM broadcast_jobs WHERE broadcast_id = %(b)s
"""


async def freeze_one(conn: AsyncConn, days: int) -> int | None:
    """Freeze the counts of one expired broadcast; its id, or None if there is none."""
    async with conn.transaction():
        bid = await queue.lock_expired(conn, days)
        if bid is None:
            return None
        counts = await (await conn.execute(FINAL_COUNTS, {"b": bid})).fetchone()
        assert counts is not None
        await queue.freeze(conn, bid, counts["counts"])
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
