"""The delivery queue: every statement that moves a job between states lives here.

pending|retry --claim--> sending --outcome--> sent | retry | failed
sending --not started, shutting down--> back (attempt given back)
sending --owner died--> retry as a suspect (attempt given back, death counted)
sending --owner died holding it as its one suspect, the second time--> failed (rejected)

Each statement names the invariant of shared/DESIGN.md it keeps.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection, sql

from senddock.delivery.outcome import Reply, Transition

AsyncConn = AsyncConnection[dict[str, Any]]

# Enqueue and resume NOTIFY this channel; idle workers LISTEN on it instead of polling hard.
NOTIFY_CHANNEL = "senddock_jobs"


@dataclass(frozen=True)
class Job:
    """A claimed job: what a sender needs to render and send one message."""

    id: int
    broadcast_id: int
    email: str
    name: str
    # The subscriber's attributes as JSON text, parsed per job by the sender: one subscriber's
    # odd data then fails that job alone (psycopg's own parser, past about 1,000 levels of
    # nesting, would fail the whole claim, and every job in it).
    attributes: str
    attempts: int
    sender_faults: int
    message_id: str
    # The subscriber the job is for: its unsubscribe link names it.
    subscriber_id: int = 0
    # Claimed as its process's one suspect (a worker died holding it before): see RESCUE.
    suspect: bool = False


# Invariant 2: one statement claims; the CTE locks at most n rows (LIMIT inside the locking
# SELECT), counts the attempt at claim, and commits before anything is sent. A job whose
# address was suppressed after enqueue fails here as suppressed and is never sent.
# The limit is written into the statement by `claim_sql` (this is only its template), not bound:
# with `LIMIT $1` the generic plan must guess the limit, and past about 100,000 claimable jobs
# Postgres never adopts it and plans every claim anew (about a millisecond); a fixed limit lets
# it keep one plan.
# Ordinary jobs are those no dead worker held (`deaths = 0`). A process that holds no suspect
# also takes at most one suspect (`{suspects}` is 1 or 0), through their own partial index:
# one at a time, so that if the process dies again, RESCUE can charge that one job alone.
CLAIM_TEMPLATE = """
WITH suspect AS (
    SELECT j.id, true AS suspect
    FROM broadcast_jobs j
    JOIN broadcasts b ON b.id = j.broadcast_id
    WHERE j.status IN ('pending', 'retry') AND j.deaths > 0 AND j.run_at <= now()
      AND b.status = 'running'
    ORDER BY j.run_at
    LIMIT {suspects}
    FOR UPDATE OF j SKIP LOCKED
), ordinary AS (
    SELECT j.id, false AS suspect
    FROM broadcast_jobs j
    JOIN broadcasts b ON b.id = j.broadcast_id
    WHERE j.status IN ('pending', 'retry') AND j.deaths = 0 AND j.run_at <= now()
      AND b.status = 'running'
    ORDER BY j.run_at
    LIMIT {n}
    FOR UPDATE OF j SKIP LOCKED
), picked AS (
    SELECT p.id, p.suspect, EXISTS (
               SELECT 1 FROM suppressions s WHERE lower(s.email) = lower(j.email)
           ) AS suppressed
    FROM (SELECT * FROM suspect UNION ALL SELECT * FROM ordinary) p
    JOIN broadcast_jobs j ON j.id = p.id
), claimed AS (
    UPDATE broadcast_jobs j
    SET status        = CASE WHEN p.suppressed THEN 'failed' ELSE 'sending' END,
        failure       = CASE WHEN p.suppressed THEN 'suppressed' END,
        attempts      = j.attempts + CASE WHEN p.suppressed THEN 0 ELSE 1 END,
        suspect_claim = p.suspect AND NOT p.suppressed,
        owner         = %(owner)s,
        claimed_at    = now(),
        updated_at    = now()
    FROM picked p
    WHERE j.id = p.id
    RETURNING j.id, j.broadcast_id, j.subscriber_id, j.email, j.status, j.attempts,
              j.sender_faults, j.message_id, j.suspect_claim
)
SELECT c.id, c.broadcast_id, c.email, s.name, s.attributes::text AS attributes, c.attempts,
       c.sender_faults, c.message_id, c.subscriber_id, c.suspect_claim AS suspect
FROM claimed c JOIN subscribers s ON s.id = c.subscriber_id
WHERE c.status = 'sending'
ORDER BY c.id
"""

# Invariants 3 and 4 with group commit: the outcomes of many sessions in one statement, each
# row fenced by its claim: still `sending`, for this owner, at this attempt. Only the rows
# returned were written.
# Every fence value (owner, attempt, the `sending` it was claimed into) comes with its row, so
# the primary key is the only index that can find the rows: fenced by constants, the planner
# read every row this process holds through broadcast_jobs_sending and hashed them, for each
# group (a third of the statement's cost with 250 claims held).
RECORD_MANY = """
UPDATE broadcast_jobs j
SET status        = r.status,
    failure       = r.failure,
    attempts      = j.attempts - r.give_back,
    sender_faults = j.sender_faults + r.sender_fault,
    run_at        = now() + make_interval(secs => r.delay),
    sent_at       = CASE WHEN r.status = 'sent' THEN now() END,
    last_code     = r.code,
    last_enhanced = r.enhanced,
    last_reply    = r.reply,
    last_stage    = r.stage,
    updated_at    = now()
FROM jsonb_to_recordset(%(outcomes)s::jsonb)
     AS r(id bigint, owner int, held text, attempt int, status text, failure text,
          give_back int, sender_fault int, delay float8, code int, enhanced text, reply text,
          stage text)
WHERE j.id = r.id AND j.owner = r.owner AND j.attempts = r.attempt AND j.status = r.held
RETURNING j.id
"""
# Invariant 6 for a group: the bounces among the rows just written, in the same transaction.
SUPPRESS_BOUNCES = """
INSERT INTO suppressions (email, reason, source_broadcast_id, detail)
SELECT email, 'bounce', broadcast_id, detail
FROM unnest(%(emails)s::text[], %(broadcast_ids)s::bigint[], %(details)s::text[])
     AS b(email, broadcast_id, detail)
ON CONFLICT ((lower(email))) DO NOTHING
"""
TAG_ALL_BOUNCED = """
UPDATE subscribers SET status = 'bounced', updated_at = now()
WHERE lower(email) = ANY(%(lowered)s::text[])
"""
READ_BACK_MANY = """
SELECT id, status, owner, attempts FROM broadcast_jobs WHERE id = ANY(%(ids)s::bigint[])
"""

# Claims this process holds but never started (shutdown, or a claim whose commit reply was
# lost): back to where they were, the attempt given back. Fenced like an outcome.
RELEASE = """
UPDATE broadcast_jobs j
SET status     = CASE WHEN j.attempts - 1 = 0 THEN 'pending' ELSE 'retry' END,
    attempts   = j.attempts - 1,
    owner      = NULL,
    run_at     = now(),
    updated_at = now()
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[]) AS r(id, attempt)
WHERE j.id = r.id AND j.owner = %(owner)s AND j.attempts = r.attempt AND j.status = 'sending'
"""
RELEASE_ORPHANS = """
UPDATE broadcast_jobs
SET status     = CASE WHEN attempts - 1 = 0 THEN 'pending' ELSE 'retry' END,
    attempts   = attempts - 1,
    owner      = NULL,
    run_at     = now(),
    updated_at = now()
WHERE owner = %(owner)s AND status = 'sending' AND NOT (id = ANY(%(held)s::bigint[]))
"""

# Invariant 5: only jobs of owners known dead are rescued. Which of them killed the process
# (if one did) is unknown, and most were never started: each goes back to retry (it may have
# been sent, so it is not pending) with its attempt given back and the death counted
# (`deaths`): a suspect from now on, claimed one at a time a process (CLAIM_TEMPLATE). The one
# a process held as its suspect is charged the death alone (`alone_deaths`); charged
# SUSPECT_DEATHS times it fails as rejected, never tried again, so a job that kills every
# worker that takes it cannot retry forever (invariant 2's reason), and no other job pays.
RESCUE = """
WITH dead AS (
    SELECT j.id, j.suspect_claim AND j.alone_deaths + 1 >= %(alone_limit)s AS poison
    FROM broadcast_jobs j
    WHERE j.status = 'sending' AND j.owner = ANY(%(dead)s::bigint[])
)
UPDATE broadcast_jobs j
SET status        = CASE WHEN d.poison THEN 'failed' ELSE 'retry' END,
    failure       = CASE WHEN d.poison THEN 'rejected' END,
    attempts      = j.attempts - CASE WHEN d.poison THEN 0 ELSE 1 END,
    deaths        = j.deaths + 1,
    alone_deaths  = j.alone_deaths + CASE WHEN j.suspect_claim THEN 1 ELSE 0 END,
    suspect_claim = false,
    owner         = NULL,
    run_at        = now(),
    last_stage    = 'rescue',
    last_code     = NULL,
    last_enhanced = NULL,
    last_reply    = CASE WHEN d.poison
                         THEN 'worker died while sending this job (' || (j.alone_deaths + 1)
                              || ' times, as its only suspect); not sent again'
                         ELSE 'worker ' || j.owner
                              || ' died while holding this job; attempt given back' END,
    updated_at    = now()
FROM dead d
WHERE j.id = d.id
"""
# A job its process held alone as a suspect this many times when the process died fails.
SUSPECT_DEATHS = 2

# Invariant 8: "done" is observable. A broadcast is finished, and its campaign sent, only when
# it is fully enqueued (no broadcast_enqueues row: the last chunk deletes it with its jobs) and
# no job is pending, sending or retry. A cancelled broadcast's jobs that were in flight when it
# was cancelled, and came back as retry, are cancelled here too.
FINISH = """
WITH leftovers AS (
    UPDATE broadcast_jobs j SET status = 'cancelled', updated_at = now()
    FROM broadcasts b
    WHERE b.status = 'cancelled' AND j.broadcast_id = b.id AND j.status IN ('pending', 'retry')
), done AS (
    -- `seen` is the broadcast as of this statement's snapshot; if `retry-failed` reopened it
    -- since (bumping generation), the re-read row no longer matches and it is not finished.
    UPDATE broadcasts b SET status = 'finished', finished_at = now()
    FROM broadcasts seen
    WHERE seen.id = b.id AND b.generation = seen.generation AND b.status = 'running'
      AND NOT EXISTS (SELECT 1 FROM broadcast_enqueues e WHERE e.broadcast_id = b.id)
      -- Invariant 8: no job left in pending, sending or retry: its total less its jobs in a
      -- final state, from the counters (queue/counts.py), a few rows however big it is (a
      -- NOT EXISTS over its jobs walked every sent one before the first pending, each call).
      AND (SELECT coalesce(sum(CASE WHEN k.state = 'total' THEN k.n
                                    WHEN k.state = 'retry' THEN 0 ELSE -k.n END), 0)
           FROM broadcast_counts k WHERE k.broadcast_id = b.id) = 0
    RETURNING b.id, b.campaign_id
)
UPDATE campaigns c SET status = 'sent', updated_at = now()
FROM done WHERE c.id = done.campaign_id
RETURNING c.id
"""

# A broadcast whose relay keeps rejecting *us* stops claiming until a person resumes it.
PAUSE_FOR_SENDER_FAULT = """
WITH b AS (
    UPDATE broadcasts SET status = 'paused', pause_reason = %(reason)s,
                          last_sender_fault = %(reason)s
    WHERE id = %(broadcast_id)s AND status = 'running'
    RETURNING campaign_id
)
UPDATE campaigns c SET status = 'paused', updated_at = now() FROM b WHERE c.id = b.campaign_id
"""
NOTE_SENDER_FAULT = "UPDATE broadcasts SET last_sender_fault = %(reason)s WHERE id = %(id)s"


@functools.lru_cache(maxsize=8)
def claim_sql(n: int, suspects: int = 0) -> str:
    """The claim statement, taking at most `n` ordinary jobs and `suspects` suspects."""
    literal = {"n": sql.Literal(int(n)), "suspects": sql.Literal(int(suspects))}
    return sql.SQL(CLAIM_TEMPLATE).format(**literal).as_string(None)


async def claim(conn: AsyncConn, owner: int, n: int, *, suspect: bool = False) -> list[Job]:
    """Claim up to n due jobs for `owner` (and one suspect, if `suspect`) and commit the claim.

    One statement on an autocommit connection is its own transaction: it has committed when
    its rows arrive, with one round trip instead of BEGIN, the claim, COMMIT.
    """
    _own_transaction(conn)
    cur = await conn.execute(claim_sql(n, 1 if suspect else 0), {"owner": owner})
    rows = await cur.fetchall()
    return [
        Job(
            id=r["id"],
            broadcast_id=r["broadcast_id"],
            email=r["email"],
            name=r["name"],
            attributes=r["attributes"] or "{}",
            attempts=r["attempts"],
            sender_faults=r["sender_faults"],
            message_id=r["message_id"],
            subscriber_id=r["subscriber_id"],
            suspect=r["suspect"],
        )
        for r in rows
    ]


def _own_transaction(conn: AsyncConn) -> None:
    """Refuse a connection on which one statement would not commit on its own."""
    if not conn.autocommit:
        raise ValueError("queue statements need an autocommit connection")


def _record_params(job: Job, owner: int, t: Transition, reply: Reply) -> dict[str, Any]:
    return {
        "id": job.id,
        "owner": owner,
        "held": "sending",
        "attempt": job.attempts,
        "status": t.status,
        "failure": t.failure,
        "give_back": 0 if t.count_attempt else 1,
        "sender_fault": 1 if t.sender_fault else 0,
        "delay": t.delay,
        "code": reply.code,
        "enhanced": reply.enhanced,
        "reply": reply.text[:1000],  # storable as it is (outcome.Reply)
        "stage": reply.stage,
    }


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to: the job, its transition and the reply that decided it."""

    job: Job
    transition: Transition
    reply: Reply


def outcome_rows(owner: int, outcomes: list[Outcome]) -> str:
    """RECORD_MANY's one parameter: dumping JSON is one C call, where eleven arrays would cost
    a Python loop each."""
    return json.dumps([_record_params(o.job, owner, o.transition, o.reply) for o in outcomes])


async def record_many(conn: AsyncConn, owner: int, outcomes: list[Outcome]) -> set[int]:
    """Write many outcomes in one transaction (group commit); the ids written.

    An id missing from the result lost its claim (rescued or released) and was not written.
    """
    params = {"outcomes": outcome_rows(owner, outcomes)}
    if not any(o.transition.suppress for o in outcomes):
        _own_transaction(conn)
        # The common group: one statement, its own transaction on an autocommit connection.
        cur = await conn.execute(RECORD_MANY, params)
        return {int(r["id"]) for r in await cur.fetchall()}
    async with conn.transaction():
        cur = await conn.execute(RECORD_MANY, params)
        written = {int(r["id"]) for r in await cur.fetchall()}
        bounced = [o for o in outcomes if o.transition.suppress and o.job.id in written]
        if bounced:
            await conn.execute(
                SUPPRESS_BOUNCES,
                {
                    "emails": [o.job.email for o in bounced],
                    "broadcast_ids": [o.job.broadcast_id for o in bounced],
                    "details": [o.reply.text for o in bounced],
                },
            )
            await conn.execute(TAG_ALL_BOUNCED, {"lowered": [o.job.email.lower() for o in bounced]})
    return written


async def landed_many(conn: AsyncConn, owner: int, jobs: list[Job]) -> set[int]:
    """After a `record_many` whose commit was never acknowledged: the ids whose outcome landed.

    An outcome landed if its row is no longer our claim at this attempt yet still names us as
    owner (an outcome keeps the owner; a rescue or release clears it). The group is one
    transaction, so either every outcome that matched its fence landed, or none did.
    """
    cur = await conn.execute(READ_BACK_MANY, {"ids": [j.id for j in jobs]})
    rows = {int(r["id"]): r for r in await cur.fetchall()}
    found = set()
    for job in jobs:
        row = rows.get(job.id)
        if row is None or row["owner"] != owner:
            continue
        if row["status"] != "sending" or row["attempts"] != job.attempts:
            found.add(job.id)
    return found


async def release(conn: AsyncConn, owner: int, jobs: list[Job]) -> None:
    """Give back claims that were never started."""
    if jobs:
        params = {
            "owner": owner,
            "ids": [j.id for j in jobs],
            "attempts": [j.attempts for j in jobs],
        }
        await conn.execute(RELEASE, params)


async def release_orphans(conn: AsyncConn, owner: int, held: list[int]) -> int:
    """Give back claims of `owner` that no sender holds (a claim whose reply was lost)."""
    cur = await conn.execute(RELEASE_ORPHANS, {"owner": owner, "held": held})
    return cur.rowcount


async def rescue(conn: AsyncConn, dead: list[int]) -> int:
    """Return the jobs of dead owners as suspects (RESCUE); the number rescued."""
    if not dead:
        return 0
    cur = await conn.execute(RESCUE, {"dead": dead, "alone_limit": SUSPECT_DEATHS})
    return cur.rowcount


async def finish(conn: AsyncConn) -> list[int]:
    """Mark finished every running broadcast with nothing unfinished; the campaigns now sent."""
    cur = await conn.execute(FINISH)
    return [int(r["id"]) for r in await cur.fetchall()]


async def pause_for_sender_fault(conn: AsyncConn, broadcast_id: int, reason: str) -> None:
    await conn.execute(PAUSE_FOR_SENDER_FAULT, {"broadcast_id": broadcast_id, "reason": reason})


async def note_sender_fault(conn: AsyncConn, broadcast_id: int, reason: str) -> None:
    await conn.execute(NOTE_SENDER_FAULT, {"id": broadcast_id, "reason": reason})
