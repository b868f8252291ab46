"""Broadcast(): enqueue a campaign, and nothing else.

`broadcast()` is one short transaction: it creates the broadcast, fixes who its recipients are
(subscribers up to the highest id now, members of the campaign's lists now), enqueues the first
small chunk of jobs so sending starts at once, and returns. Workers enqueue the rest with
`enqueue_chunk`, each chunk one set-based transaction that inserts its jobs and advances the
cursor together: a crash loses at most an uncommitted chunk, which the next chunk redoes, and the
unique key (broadcast, subscriber) makes a job exist at most once (invariant 7). A big
broadcast's id range is split in PARTS parts, enqueued in parallel (two cores insert 1.5x
faster than one). A broadcast is not finished while it is still being enqueued (queue.FINISH).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from senddock.campaigns.campaigns import CampaignError, UnknownCampaign
from senddock.db import connect
from senddock.delivery.queue import NOTIFY_CHANNEL

log = logging.getLogger("senddock.enqueue")

Conn = psycopg.Connection[dict[str, Any]]

# The first chunk is enqueued inside `broadcast()`: small, so `campaign send` returns in a few
# milliseconds and the first message can leave at once. Workers then take large chunks.
FIRST_CHUNK = 1_000
CHUNK = 50_000
# Parts enqueued in parallel, for id ranges of at least PARTS * CHUNK; and each worker runs
# as many enqueue tasks.
PARTS = 2
# Held shared by every chunk; a subscriber delete takes it exclusively (migration 0006).
CHUNK_LOCK = (1397048900, 1)

LOCK_CAMPAIGN = """
SELECT id, list_id, from_addr, status, broadcast_id FROM campaigns WHERE id = %s FOR UPDATE
"""
NEW_BROADCAST = """
INSERT INTO broadcasts (campaign_id, total, message_token, message_domain)
VALUES (%(c)s, 0, %(token)s, %(domain)s) RETURNING id
"""
# The recipients are fixed now: nobody who signs up after this moment is swept in.
LAST_ID = "SELECT coalesce(max(id), 0) AS last FROM subscribers"
NEW_ENQUEUE = """
INSERT INTO broadcast_enqueues (broadcast_id, part, after_id, last_id, since)
SELECT %(b)s, k, %(last)s * k / %(parts)s, %(last)s * (k + 1) / %(parts)s, now()
FROM generate_series(0, %(parts)s - 1) k
"""
LINK = """
UPDATE campaigns SET broadcast_id = %(b)s, status = 'sending', updated_at = now() WHERE id = %(c)s
"""

# One part of a broadcast still being enqueued, its row locked for this chunk. SKIP LOCKED: a
# worker is enqueuing that part already, take another or come back later.
TAKE = """
SELECT e.broadcast_id, e.part, e.after_id, e.last_id, e.since, b.campaign_id, b.status,
       b.message_token, b.message_domain
FROM broadcast_enqueues e JOIN broadcasts b ON b.id = e.broadcast_id
WHERE %(b)s::bigint IS NULL OR e.broadcast_id = %(b)s
ORDER BY e.broadcast_id, e.part
LIMIT 1
FOR NO KEY UPDATE OF e SKIP LOCKED
"""
# Where this chunk ends: `n` memberships past the cursor on each of the campaign's lists (read
# from the membership key, list_id then subscriber_id), the nearest of those; past the last of
# every list, the snapshot bound.
CHUNK_END = """
SELECT least(%(last)s::bigint, min(k.sid)) AS hi
FROM campaign_lists cl
CROSS JOIN LATERAL (
    SELECT m.subscriber_id AS sid FROM list_memberships m
    WHERE m.list_id = cl.list_id AND m.subscriber_id > %(after)s
    ORDER BY m.subscriber_id OFFSET %(n)s - 1 LIMIT 1
) k
WHERE cl.campaign_id = %(c)s
"""
# Invariant 7: one job per distinct (one subscriber per address), active, non-suppressed
# address that is confirmed on any of the campaign's lists, for subscriber ids in (after, hi].
# The Message-ID is fixed here, so every attempt of the job carries the same one (invariant 9).
# The range is spelled on both tables so each is read through its key, not scanned.
ENQUEUE = """
INSERT INTO broadcast_jobs (broadcast_id, subscriber_id, email, message_id)
SELECT %(b)s::bigint, s.id, s.email,
       '<sd.' || %(b)s::bigint || '.' || s.id || '.' || %(token)s::text || '@'
       || %(domain)s::text || '>'
FROM subscribers s
WHERE s.id > %(after)s AND s.id <= %(hi)s AND s.status = 'active'
  AND s.id IN (SELECT m.subscriber_id FROM list_memberships m
               WHERE m.list_id = ANY(%(lists)s::bigint[])
                 AND m.subscriber_id > %(after)s AND m.subscriber_id <= %(hi)s
                 AND m.status = 'confirmed' AND m.created_at <= %(since)s)
  AND NOT EXISTS (SELECT 1 FROM suppressions x WHERE lower(x.email) = lower(s.email))
"""
# Chunks never overlap (each part's range is its own, its cursor moves with its jobs, its row
# is locked while a chunk runs), so a job that exists already is never expected; the unique key
# still refuses one. Plain, the insert costs about a quarter less than with ON CONFLICT
# (speculative insertion writes a WAL record more a row): it goes plain, in a savepoint, and
# only if the key refuses a row is the chunk inserted again skipping the jobs that exist.
ENQUEUE_SKIPPING = ENQUEUE.rstrip() + "\nON CONFLICT (broadcast_id, subscriber_id) DO NOTHING\n"
ADVANCE = """
UPDATE broadcast_enqueues SET after_id = %(hi)s, chunks = chunks + 1, updated_at = now()
WHERE broadcast_id = %(b)s AND part = %(part)s
"""
DONE = "DELETE FROM broadcast_enqueues WHERE broadcast_id = %(b)s AND part = %(part)s"
# Last in the chunk, so the row lock is short: a cancel that committed meanwhile is seen here
# (the chunk is then rolled back); one that comes later waits for this commit and cancels the
# chunk's jobs with the rest.
ADD_TOTAL = "UPDATE broadcasts SET total = total + %(n)s WHERE id = %(b)s RETURNING status"
# Is anyone left to send to past the cursor? (Only asked when the first chunk found nobody.)
ANYONE_LEFT = """
SELECT EXISTS (
    SELECT 1 FROM subscribers s
    WHERE s.id > %(after)s AND s.id <= %(last)s AND s.status = 'active'
      AND s.id IN (SELECT m.subscriber_id FROM list_memberships m
                   WHERE m.list_id = ANY(%(lists)s::bigint[]) AND m.subscriber_id > %(after)s
                     AND m.status = 'confirmed' AND m.created_at <= now())
      AND NOT EXISTS (SELECT 1 FROM suppressions x WHERE lower(x.email) = lower(s.email))
) AS found
"""


class NothingToSend(CampaignError):
    """The campaign's list has no one to send to."""


@dataclass(frozen=True)
class Chunk:
    """What one enqueue chunk did."""

    broadcast_id: int
    jobs: int  # jobs inserted by this chunk
    after_id: int  # the cursor after it
    done: bool  # the broadcast is fully enqueued (or was cancelled: nothing more to enqueue)


def broadcast(conn: Conn, campaign_id: int) -> tuple[int, int, bool]:
    """Start sending campaign `campaign_id`: (broadcast id, jobs enqueued so far, created now).

    Idempotent: a campaign has one broadcast. Returns after the first small chunk; workers
    enqueue the rest (`campaign status` shows the progress).
    """
    with conn.transaction():
        row = conn.execute(LOCK_CAMPAIGN, (campaign_id,)).fetchone()
        if row is None:
            raise UnknownCampaign(f"no campaign with id {campaign_id}")
        if row["broadcast_id"] is not None:
            if row["status"] == "cancelled":
                raise CampaignError(
                    f"campaign {campaign_id} is cancelled (broadcast {row['broadcast_id']}):"
                    " nothing more of it will be sent"
                )
            known = conn.execute(
                "SELECT total FROM broadcasts WHERE id = %s", (row["broadcast_id"],)
            ).fetchone()
            return int(row["broadcast_id"]), int(known["total"]) if known else 0, False
        if row["status"] != "draft":
            raise CampaignError(f"campaign {campaign_id} is {row['status']}, not a draft")
        domain = email.utils.parseaddr(str(row["from_addr"]))[1].rsplit("@", 1)[-1]
        params = {"c": campaign_id, "token": secrets.token_hex(4), "domain": domain}
        b = conn.execute(NEW_BROADCAST, params).fetchone()
        assert b is not None
        bid = int(b["id"])
        last = conn.execute(LAST_ID).fetchone()
        assert last is not None
        parts = PARTS if int(last["last"]) >= PARTS * CHUNK else 1
        conn.execute(NEW_ENQUEUE, {"b": bid, "last": int(last["last"]), "parts": parts})
        conn.execute(LINK, {"b": bid, "c": campaign_id})
        chunk = enqueue_chunk(conn, bid, FIRST_CHUNK)
        if chunk is None:  # we created it in this transaction: it cannot be locked elsewhere
            raise CampaignError(f"campaign {campaign_id}: could not start its broadcast")
        if chunk.jobs == 0 and not _anyone_left(conn, campaign_id, chunk, int(last["last"])):
            raise NothingToSend(
                f"campaign {campaign_id}: its list has no confirmed, unsuppressed subscriber"
            )
        conn.execute(f"NOTIFY {NOTIFY_CHANNEL}")
    return bid, chunk.jobs, True


def _anyone_left(conn: Conn, campaign_id: int, chunk: Chunk, last: int) -> bool:
    """Is anyone to send to past the first chunk? (Asked only when it found nobody.)"""
    params = {"after": chunk.after_id, "last": last, "lists": _lists(conn, campaign_id)}
    row = conn.execute(ANYONE_LEFT, params).fetchone()
    return bool(row and row["found"])


def _lists(conn: Conn, campaign_id: int) -> list[int]:
    rows = conn.execute(
        "SELECT list_id FROM campaign_lists WHERE campaign_id = %s", (campaign_id,)
    ).fetchall()
    return [int(r["list_id"]) for r in rows]


def enqueue_chunk(conn: Conn, broadcast_id: int | None = None, size: int = CHUNK) -> Chunk | None:
    """Enqueue the next chunk of one broadcast still being enqueued (any, or `broadcast_id`).

    One transaction: the jobs, the cursor, the broadcast's total and a NOTIFY commit together.
    None: no broadcast needs (or is free for) a chunk now.
    """
    chunk: Chunk | None = None
    with conn.transaction():
        e = conn.execute(TAKE, {"b": broadcast_id}).fetchone()
        if e is None:
            return None
        bid, part = int(e["broadcast_id"]), int(e["part"])
        chunk = Chunk(bid, 0, int(e["after_id"]), True)  # what a cancelled broadcast gets
        if e["status"] == "cancelled":
            conn.execute(DONE, {"b": bid, "part": part})  # cancel stops the enqueue too
            return chunk
        # A subscriber delete waits for this chunk (migration 0006, subscribers_delete_guard).
        conn.execute("SELECT pg_advisory_xact_lock_shared(%s, %s)", CHUNK_LOCK)
        conn.execute("SET LOCAL jit = off")  # compiling costs more than it saves per chunk
        # A chunk is a bulk join over one id range: hash and merge joins are linear whatever
        # the statistics say. With stale ones (a list imported a moment ago) the planner may
        # pick a nested loop over a scan, quadratic in the chunk (seen: minutes for 50,000).
        conn.execute("SET LOCAL enable_nestloop = off")
        after, last = int(e["after_id"]), int(e["last_id"])
        end = conn.execute(
            CHUNK_END, {"last": last, "after": after, "n": size, "c": e["campaign_id"]}
        ).fetchone()
        hi = int(end["hi"]) if end and end["hi"] is not None else last
        params = {
            "b": bid,
            "after": after,
            "hi": hi,
            "since": e["since"],
            "lists": _lists(conn, int(e["campaign_id"])),
            "token": e["message_token"],
            "domain": e["message_domain"],
        }
        n = _insert_jobs(conn, params) if hi > after else 0
        done = hi >= last
        conn.execute(DONE if done else ADVANCE, {"b": bid, "part": part, "hi": hi})
        now = conn.execute(ADD_TOTAL, {"b": bid, "n": n}).fetchone()
        if now is not None and now["status"] == "cancelled":
            raise psycopg.Rollback  # cancelled during this chunk: none of it happened
        if n:
            conn.execute(f"NOTIFY {NOTIFY_CHANNEL}")
        chunk = Chunk(bid, n, hi, done)
    _fresh_statistics(conn, chunk)
    return chunk


def _insert_jobs(conn: Conn, params: dict[str, Any]) -> int:
    """A chunk's jobs; how many were inserted (see ENQUEUE_SKIPPING)."""
    try:
        with conn.transaction():
            return conn.execute(ENQUEUE, params).rowcount
    except psycopg.errors.UniqueViolation:
        b, after, hi = params["b"], params["after"], params["hi"]
        log.warning("broadcast %s: some jobs for ids (%s, %s] exist already", b, after, hi)
        return conn.execute(ENQUEUE_SKIPPING, params).rowcount


# The claim's plan depends on broadcast_jobs' statistics. Autovacuum notices many new rows only
# at its next pass (up to a minute): meanwhile the planner, believing the table small, walks the
# whole broadcast on every claim (measured: 9 ms a claim at 20,000 jobs instead of 0.3 ms).
ANALYZE_AFTER = 2_000
ANALYZE_EVERY = 10.0
_analyzed_at = 0.0


def _fresh_statistics(conn: Conn, chunk: Chunk) -> None:
    """ANALYZE after the first big chunk and at the end of a big enqueue, at most every 10 s."""
    global _analyzed_at
    if chunk.jobs < ANALYZE_AFTER:
        return
    now = time.monotonic()
    if chunk.done or now - _analyzed_at >= ANALYZE_EVERY:
        _analyzed_at = now
        conn.execute("ANALYZE broadcast_jobs")


def enqueue_all(conn: Conn, broadcast_id: int | None = None, size: int = CHUNK) -> int:
    """Enqueue chunks until no broadcast (or `broadcast_id`) is left to enqueue; jobs inserted."""
    total = 0
    while (chunk := enqueue_chunk(conn, broadcast_id, size)) is not None:
        total += chunk.jobs
    return total


async def run_enqueuer(
    url: str,
    stopping: asyncio.Event,
    woke: Callable[[], None],
    size: int = CHUNK,
    idle: float = 1.0,
) -> None:
    """A worker's enqueue task: carry every broadcast being enqueued to its end, chunk by chunk.

    Runs the chunks on a connection of its own in a thread (each commits on its own, so
    stopping between two loses nothing); waits for a NOTIFY, or `idle` seconds, when there is
    nothing to do. `woke` is called after each chunk that inserted jobs (senders wake up).
    """
    conn: Conn | None = None
    delay = 0.05
    while not stopping.is_set():
        try:
            if conn is None or conn.closed:
                conn = await asyncio.to_thread(_listening, url)
            chunk = await asyncio.to_thread(enqueue_chunk, conn, None, size)
            delay = 0.05
            if chunk is None:
                await asyncio.to_thread(_wait_notify, conn, idle)
            elif chunk.jobs:
                woke()
        except psycopg.OperationalError as exc:
            log.warning("enqueue interrupted (%s); retrying", " ".join(str(exc).split()))
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
            conn = None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
    if conn is not None:
        conn.close()


def _listening(url: str) -> Conn:
    conn = connect(url)
    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
    return conn


def _wait_notify(conn: Conn, timeout: float) -> None:
    for _ in conn.notifies(timeout=timeout, stop_after=1):
        pass
