"""The queue: every transition of a job, broadcast and campaign, and the statement making it.

Each arrow names its statement in jobs.sql (the invariants are those of docs/design.md):

Campaign (before it has a broadcast) and its schedule
    draft --schedule_draft--> draft with send_at (None: unscheduled again)
    draft with send_at --due_drafts (locked) + the send below--> sending
    draft with send_at, nobody to send to --give_up_schedule--> draft, send_at None, reason kept
    draft --cancel_draft--> cancelled
    draft --new_broadcast, new_enqueue, link_broadcast, first chunk--> sending (broadcast running)

Broadcast (its campaign follows: the trigger campaign_follows_broadcast of migration 0013 writes
campaigns.status in the same statement, running -> sending, paused -> paused, finished -> sent,
cancelled -> cancelled; nothing else writes it once a campaign has a broadcast)
    running --pause_for_sender_fault (replies about us, several in a row)--> paused
    running --set_running (campaign pause)--> paused --set_running (resume)--> running
    running|paused --cancel_broadcast--> cancelled
    running, fully enqueued, no job pending|sending|retry|unconfirmed --finish--> finished
    finished --bump_generation, requeue_failed, reopen (retry-failed)--> running
    running|paused --bump_generation, requeue_failed (retry-failed)--> unchanged (a paused one
                                    waits for resume)
    finished|cancelled past retention --expired, freeze--> same status, counts frozen, purged

Job (a row of broadcast_jobs)
    (none) --enqueue (a chunk: take_enqueue .. add_total)--> pending
    pending|retry, due, of a running broadcast --claim--> sending (attempt counted; at most
                                    one suspect a process)
    pending|retry, address now suppressed --claim--> failed (suppressed), never sent
    sending --a mark: its final dot about to go--> sending; carried on its session's previous
                                    outcome's row when that is `sent` and in the same group
                                    (record_many, record_and_mark: next_dot, next_relay),
                                    else on its own row (mark_dots, record_and_mark: dot_at)
    sending --record_many: 250 after DATA--> sent
    sending --record_many: the dot went, no reply (RFC 1047), SENDDOCK_UNCONFIRMED=hold-->
                                    unconfirmed (attempt spent, owner kept)
    sending --record_many: 4xx, network, DNS--> retry (run_at + backoff) | failed (exhausted)
    sending --record_many: 5xx at RCPT, 5.1.x or none--> failed (bounced)
                                    + suppress_bounces, tag_all_bounced in the same transaction
    sending --record_many: other 5.x.x at RCPT, or this job's own error--> failed (rejected)
    sending --record_many: a reply about us--> retry after the first backoff, attempt given
                                    back | failed (rejected) at job_sender_fault_limit; a few
                                    in a row pause the broadcast (pause_for_sender_fault)
    sending, claimed, never started --release / release_orphans--> pending|retry, attempt back
                                    (cancelled at once if its broadcast is cancelled)
    sending, owner dead --rescue--> retry as a suspect (attempt back, death counted)
    sending, owner dead, its dot marked, hold --rescue--> unconfirmed (attempt spent, owner kept,
                                    never resent on its own; with resend: retry as above)
    unconfirmed --record_many (its owner, same attempt: a late reply after a lease lapse)-->
                                    sent | retry | failed as from sending
    unconfirmed --resend_unconfirmed (a person)--> pending|retry, due now, attempt given back,
                                    same Message-ID
    unconfirmed --confirm (a person, from the relay's log)--> sent
    unconfirmed --confirm, resend_unconfirmed (reconcile: a source that can tell, issue 41)-->
                                    sent | pending|retry as above, settled_by the source
    unconfirmed --confirm_delivered (a provider's signed delivery event)--> sent
    sending, owner dead holding it as its one suspect, SUSPECT_DEATHS times --rescue--> failed
                                    (rejected), never sent again
    pending|retry --cancel_jobs (campaign cancelled)--> cancelled
    pending|retry of a cancelled broadcast (released while the cancel committed) --finish-->
                                    cancelled
    sending of a cancelled broadcast --record_many--> its outcome still lands
    failed, address not suppressed --requeue_failed (retry-failed)--> pending, fresh budget,
                                    same Message-ID
    sent|failed|cancelled of a frozen broadcast --delete_batch (retention)--> deleted
    pending|retry|unconfirmed of an erased subscriber --erase_jobs--> cancelled (erase_fence,
                                    erase_hold first; refused while one of theirs is sending)

`campaigns/` decides what may happen (what a draft is, who may pause, the messages) and calls
these functions in its own transaction, with the campaign locked by `lock_campaign`;
`delivery/` claims, records, releases, rescues and finishes through them. Neither writes a
status itself.
"""

from __future__ import annotations

import email.utils
import functools
import json
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import psycopg
from psycopg import AsyncConnection
from psycopg import sql as pgsql
from psycopg.types.json import Jsonb

from senddock.db import sql
from senddock.messages.message_id import key_pads

AsyncConn = AsyncConnection[dict[str, Any]]
Conn = psycopg.Connection[dict[str, Any]]

QUERIES = sql.load(__package__, "jobs.sql")
# Invariant 7: the enqueue, skipping the jobs that exist already: the same statement, so the
# two can never drift apart (only after the unique key refused a row of the plain insert).
ENQUEUE_SKIPPING = QUERIES["enqueue"] + "\nON CONFLICT (broadcast_id, subscriber_id) DO NOTHING"

# Enqueue, resume and retry-failed NOTIFY this channel; idle workers LISTEN on it instead of
# polling hard. Pause and cancel send `stop:<broadcast id>` on it.
NOTIFY_CHANNEL = "senddock_jobs"

# A job its process held alone as a suspect this many times when the process died fails.
SUSPECT_DEATHS = 2

# The first chunk is enqueued inside the send: small, so `campaign send` returns in a few
# milliseconds and the first message can leave at once. Workers then take large chunks.
FIRST_CHUNK = 1_000
CHUNK = 50_000
# Parts enqueued in parallel, for id ranges of at least PARTS * CHUNK (two cores insert 1.5x
# faster than one); and each worker runs as many enqueue tasks.
PARTS = 2
# Held shared by every chunk; a subscriber delete takes it exclusively (migration 0006).
CHUNK_LOCK = (1397048900, 1)
# ANALYZE after the first big chunk and at the end of a big enqueue, at most every 10 s.
ANALYZE_AFTER = 2_000
ANALYZE_EVERY = 10.0

log = logging.getLogger("senddock.enqueue")

# A broadcast's audience filter (broadcasts.audience_filter, a segment's text) as a boolean SQL
# expression over the subscriber row `s` and its named parameters. The caller gives it
# (campaigns/broadcast.py composes audience/segment_filter.py's compiler in), so the queue knows
# no filter language; a filtered broadcast is never enqueued without one.
Narrow = Callable[[str | None], tuple[pgsql.Composable, Mapping[str, Any]]]


# ----- Notifications -----


def wake(conn: Conn) -> None:
    """Wake idle workers when this transaction commits (there is work)."""
    conn.execute(QUERIES["wake"], {"channel": NOTIFY_CHANNEL, "payload": ""})


def _stop(conn: Conn, broadcast_id: int) -> None:
    """Ask workers to give back the claims of `broadcast_id` they have not started."""
    conn.execute(QUERIES["wake"], {"channel": NOTIFY_CHANNEL, "payload": f"stop:{broadcast_id}"})


# ----- The campaign, locked -----


@dataclass(frozen=True)
class Campaign:
    """A campaign as `lock_campaign` read it, row-locked for the caller's transaction."""

    id: int
    status: str
    broadcast_id: int | None
    from_addr: str


def lock_campaign(conn: Conn, campaign_id: int) -> Campaign | None:
    """Lock campaign `campaign_id` for this transaction (None: there is none)."""
    row = conn.execute(QUERIES["lock_campaign"], {"c": campaign_id}).fetchone()
    if row is None:
        return None
    bid = row["broadcast_id"]
    return Campaign(
        int(row["id"]), str(row["status"]), None if bid is None else int(bid), row["from_addr"]
    )


# ----- Enqueue: draft -> sending, nobody -> pending -----


@dataclass(frozen=True)
class Chunk:
    """What one enqueue chunk did."""

    broadcast_id: int
    jobs: int  # jobs inserted by this chunk
    after_id: int  # the cursor after it
    done: bool  # the broadcast is fully enqueued (or was cancelled: nothing more to enqueue)


@dataclass(frozen=True)
class Started:
    """A broadcast just created: its first chunk, and the highest subscriber id it may reach."""

    chunk: Chunk | None
    last_id: int


def broadcast_total(conn: Conn, broadcast_id: int) -> int:
    """The jobs broadcast `broadcast_id` has so far."""
    row = conn.execute(QUERIES["broadcast_total"], {"b": broadcast_id}).fetchone()
    return int(row["total"]) if row else 0


def start_broadcast(
    conn: Conn,
    campaign: Campaign,
    first_chunk: int = FIRST_CHUNK,
    audience_filter: str | None = None,
    narrow: Narrow | None = None,
) -> Started:
    """Create the locked draft `campaign`'s broadcast, its cursors and its first chunk.

    The campaign becomes `sending` (it follows its new `running` broadcast). Workers NOTIFYed
    at commit enqueue the rest. `audience_filter` (compiled by `narrow`) narrows every chunk.
    In the caller's transaction.
    """
    domain = email.utils.parseaddr(campaign.from_addr)[1].rsplit("@", 1)[-1]
    params = {
        "c": campaign.id,
        "domain": domain,
        "filter": audience_filter,
    }
    b = conn.execute(QUERIES["new_broadcast"], params).fetchone()
    assert b is not None
    bid = int(b["id"])
    last_row = conn.execute(QUERIES["last_subscriber"]).fetchone()
    assert last_row is not None
    last = int(last_row["last"])
    parts = PARTS if last >= PARTS * CHUNK else 1
    conn.execute(QUERIES["new_enqueue"], {"b": bid, "last": last, "parts": parts})
    conn.execute(QUERIES["link_broadcast"], {"b": bid, "c": campaign.id})
    chunk = enqueue_chunk(conn, bid, first_chunk, narrow)
    wake(conn)
    return Started(chunk, last)


def anyone_left(
    conn: Conn,
    campaign_id: int,
    after_id: int,
    last_id: int,
    audience_filter: str | None = None,
    narrow: Narrow | None = None,
) -> bool:
    """Is anyone to send to in (after_id, last_id]? (Asked when the first chunk found nobody.)"""
    where, extra = _audience(audience_filter, narrow)
    params = {"after": after_id, "last": last_id, "lists": _lists(conn, campaign_id), **extra}
    statement = pgsql.SQL(QUERIES["anyone_left"]).format(audience=where)
    row = conn.execute(statement, params).fetchone()
    return bool(row and row["found"])


def _audience(
    audience_filter: str | None, narrow: Narrow | None
) -> tuple[pgsql.Composable, Mapping[str, Any]]:
    """The `{audience}` condition of enqueue and anyone_left: everyone, or the filter."""
    if audience_filter is None:
        return pgsql.SQL("true"), {}
    if narrow is None:
        raise ValueError("a broadcast with an audience filter needs its compiler to enqueue")
    return narrow(audience_filter)


def _lists(conn: Conn, campaign_id: int) -> list[int]:
    rows = conn.execute(QUERIES["campaign_lists"], {"c": campaign_id}).fetchall()
    return [int(r["list_id"]) for r in rows]


def enqueue_chunk(
    conn: Conn, broadcast_id: int | None = None, size: int = CHUNK, narrow: Narrow | None = None
) -> Chunk | None:
    """Enqueue the next chunk of one broadcast still being enqueued (any, or `broadcast_id`).

    `narrow` compiles a broadcast's audience filter (a filtered broadcast needs it).

    One transaction: the jobs, the cursor, the broadcast's total and a NOTIFY commit together.
    None: no broadcast needs (or is free for) a chunk now.
    """
    chunk: Chunk | None = None
    with conn.transaction():
        e = conn.execute(QUERIES["take_enqueue"], {"b": broadcast_id}).fetchone()
        if e is None:
            return None
        bid, part = int(e["broadcast_id"]), int(e["part"])
        chunk = Chunk(bid, 0, int(e["after_id"]), True)  # what a cancelled broadcast gets
        if e["status"] == "cancelled":
            conn.execute(QUERIES["enqueue_done"], {"b": bid, "part": part})  # cancel stops it
            return chunk
        conn.execute(QUERIES["chunk_lock"], {"key": CHUNK_LOCK[0], "sub": CHUNK_LOCK[1]})
        conn.execute(QUERIES["chunk_without_jit"])
        conn.execute(QUERIES["chunk_without_nestloop"])
        after, last = int(e["after_id"]), int(e["last_id"])
        end = conn.execute(
            QUERIES["chunk_end"], {"last": last, "after": after, "n": size, "c": e["campaign_id"]}
        ).fetchone()
        hi = int(end["hi"]) if end and end["hi"] is not None else last
        where, extra = _audience(e["audience_filter"], narrow)
        ikey, okey = _token_keys(e["message_key"])
        params = {
            **extra,
            "b": bid,
            "after": after,
            "hi": hi,
            "since": e["since"],
            "lists": _lists(conn, int(e["campaign_id"])),
            "ikey": ikey,
            "okey": okey,
            "domain": e["message_domain"],
        }
        n = _insert_jobs(conn, where, params) if hi > after else 0
        done = hi >= last
        step = QUERIES["enqueue_done"] if done else QUERIES["advance_enqueue"]
        conn.execute(step, {"b": bid, "part": part, "hi": hi})
        now = conn.execute(QUERIES["add_total"], {"b": bid, "n": n}).fetchone()
        if now is not None and now["status"] == "cancelled":
            raise psycopg.Rollback  # cancelled during this chunk: none of it happened
        if n:
            wake(conn)
        chunk = Chunk(bid, n, hi, done)
    _fresh_statistics(conn, chunk)
    return chunk


def enqueue_all(
    conn: Conn, broadcast_id: int | None = None, size: int = CHUNK, narrow: Narrow | None = None
) -> int:
    """Enqueue chunks until no broadcast (or `broadcast_id`) is left to enqueue; jobs inserted."""
    total = 0
    while (chunk := enqueue_chunk(conn, broadcast_id, size, narrow)) is not None:
        total += chunk.jobs
    return total


class NoMessageKey(RuntimeError):
    """The schema predates migration 0028: no key for the Message-IDs' tokens."""


@functools.lru_cache(maxsize=4)
def _token_keys(stored: str | None) -> tuple[bytes, bytes]:
    """The enqueue's `ikey` and `okey`: the Message-ID key's padded forms."""
    if stored is None:
        raise NoMessageKey("no Message-ID key: run 'senddock migrate'")
    return key_pads(stored.encode())


def _insert_jobs(conn: Conn, where: pgsql.Composable, params: dict[str, Any]) -> int:
    """A chunk's jobs, narrowed by `where`; how many were inserted (see ENQUEUE_SKIPPING)."""
    try:
        with conn.transaction():
            plain = pgsql.SQL(QUERIES["enqueue"]).format(audience=where)
            return conn.execute(plain, params).rowcount
    except psycopg.errors.UniqueViolation:
        b, after, hi = params["b"], params["after"], params["hi"]
        log.warning("broadcast %s: some jobs for ids (%s, %s] exist already", b, after, hi)
        skipping = pgsql.SQL(ENQUEUE_SKIPPING).format(audience=where)
        return conn.execute(skipping, params).rowcount


_analyzed_at = 0.0


def _fresh_statistics(conn: Conn, chunk: Chunk) -> None:
    """ANALYZE after the first big chunk and at the end of a big enqueue (see analyze_jobs)."""
    global _analyzed_at
    if chunk.jobs < ANALYZE_AFTER:
        return
    now = time.monotonic()
    if chunk.done or now - _analyzed_at >= ANALYZE_EVERY:
        _analyzed_at = now
        conn.execute(QUERIES["analyze_jobs"])


# ----- Claim and outcome: pending|retry -> sending -> sent|retry|failed -----


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
    # Claimed as its process's one suspect (a worker died holding it before): see rescue.
    suspect: bool = False


@functools.lru_cache(maxsize=8)
def claim_sql(n: int, suspects: int = 0) -> str:
    """The claim statement, taking at most `n` ordinary jobs and `suspects` suspects.

    The limits are literals, not parameters: a measured plan needs them (jobs.sql, claim).
    """
    literal = {"n": pgsql.Literal(int(n)), "suspects": pgsql.Literal(int(suspects))}
    return pgsql.SQL(QUERIES["claim"]).format(**literal).as_string(None)


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


class Transition(Protocol):
    """Where one attempt sends its job (delivery/outcome.py decides it from the reply)."""

    @property
    def status(self) -> str: ...
    @property
    def failure(self) -> str | None: ...
    @property
    def delay(self) -> float: ...
    @property
    def count_attempt(self) -> bool: ...
    @property
    def suppress(self) -> bool: ...
    @property
    def sender_fault(self) -> bool: ...


class Reply(Protocol):
    """The reply an attempt ended with, as it is stored with the job (delivery/outcome.py)."""

    @property
    def stage(self) -> str: ...
    @property
    def code(self) -> int | None: ...
    @property
    def text(self) -> str: ...
    @property
    def enhanced(self) -> str | None: ...


def _own_transaction(conn: AsyncConn) -> None:
    """Refuse a connection on which one statement would not commit on its own."""
    if not conn.autocommit:
        raise ValueError("queue statements need an autocommit connection")


def _record_params(
    job: Job, owner: int, t: Transition, reply: Reply, carried: Dot | None = None
) -> dict[str, Any]:
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
        "next": carried.job.id if carried else None,
        "next_relay": carried.relay if carried else None,
        "next_attempt": carried.job.attempts if carried else None,
    }


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to: the job, its transition and the reply that decided it."""

    job: Job
    transition: Transition
    reply: Reply


@dataclass(frozen=True)
class Dot:
    """A job whose final dot is about to go, to the relay named `relay` (issue 23). `after`:
    the job whose outcome its session handed over last; if that outcome is `sent` and in the
    same group, it carries this mark (0025), and this job's row is not written."""

    job: Job
    relay: str
    after: int | None = None


@dataclass(frozen=True)
class Recorded:
    """What one group commit wrote: the outcomes, and the dots marked (the others lost their
    claim)."""

    outcomes: set[int]
    dots: set[int]


# A group with dots: the dots' marks and the outcomes in one statement (one round trip, one
# commit). The two never touch one row: the recorder drops the mark of a job whose outcome
# (a refusal before its dot) is in the same group.
def dot_rows(owner: int, dots: list[Dot]) -> str:
    """mark_dots's one parameter, as JSON (see outcome_rows)."""
    return json.dumps(
        [
            {"id": d.job.id, "owner": owner, "attempt": d.job.attempts, "relay": d.relay}
            for d in dots
        ]
    )


def group_rows(
    owner: int, outcomes: list[Outcome], dots: list[Dot], carried: Mapping[int, Dot] | None = None
) -> str:
    """record_and_mark's one parameter: the outcomes' rows, then the marks' (as JSON)."""
    carried = carried or {}
    rows = [
        {**_record_params(o.job, owner, o.transition, o.reply, carried.get(o.job.id)), "dot": False}
        for o in outcomes
    ]
    rows += [
        {
            "id": d.job.id,
            "owner": owner,
            "held": "sending",
            "attempt": d.job.attempts,
            "dot": True,
            "relay": d.relay,
        }
        for d in dots
    ]
    return json.dumps(rows)


def outcome_rows(
    owner: int, outcomes: list[Outcome], carried: Mapping[int, Dot] | None = None
) -> str:
    """record_many's one parameter: dumping JSON is one C call, where eleven arrays would cost
    a Python loop each. `carried`: the marks the outcomes carry, by the outcome's job id."""
    carried = carried or {}
    return json.dumps(
        [
            _record_params(o.job, owner, o.transition, o.reply, carried.get(o.job.id))
            for o in outcomes
        ]
    )


def carry(outcomes: list[Outcome], dots: list[Dot]) -> tuple[dict[int, Dot], list[Dot]]:
    """Which marks ride on an outcome of the group (0025), by that outcome's job id, and which
    are written on their own job's row. A mark rides on the previous outcome of its session
    when that outcome is `sent`: a sent row is never written again, so the mark cannot be
    overwritten while its dot is in flight. It is fenced twice (invariant 4): by that outcome's
    fence, and by its own job's (still our `sending` claim at its attempt), since a rescue
    keeps a dotted job's owner for a late 250 while it sends the next job back to retry."""
    sent = {o.job.id for o in outcomes if o.transition.status == "sent"}
    carried: dict[int, Dot] = {}
    own: list[Dot] = []
    for d in dots:
        if d.after is not None and d.after in sent and d.after not in carried:
            carried[d.after] = d
        else:
            own.append(d)
    return carried, own


async def record_many(conn: AsyncConn, owner: int, outcomes: list[Outcome]) -> set[int]:
    """Write many outcomes in one transaction (group commit); the ids written.

    An id missing from the result lost its claim (rescued or released) and was not written.
    """
    return (await record_group(conn, owner, outcomes)).outcomes


async def _record_statement(
    conn: AsyncConn, owner: int, outcomes: list[Outcome], dots: list[Dot]
) -> Recorded:
    carried, dots = carry(outcomes, dots)
    if not dots:
        params = {"outcomes": outcome_rows(owner, outcomes, carried)}
        cur = await conn.execute(QUERIES["record_many"], params)
        rows = await cur.fetchall()
        return Recorded({int(r["id"]) for r in rows}, _carried(carried, rows))
    if not outcomes:
        cur = await conn.execute(QUERIES["mark_dots"], {"dots": dot_rows(owner, dots)})
        return Recorded(set(), {int(r["id"]) for r in await cur.fetchall()})
    params = {"rows": group_rows(owner, outcomes, dots, carried)}
    rows = await (await conn.execute(QUERIES["record_and_mark"], params)).fetchall()
    written = {int(r["id"]) for r in rows if not r["dot"]}
    marked = {int(r["id"]) for r in rows if r["dot"]}
    outcomes_written = [r for r in rows if not r["dot"]]
    return Recorded(written, marked | _carried(carried, outcomes_written))


def _carried(carried: Mapping[int, Dot], rows: list[dict[str, Any]]) -> set[int]:
    """The marks that landed on an outcome: those its written row carries (a mark whose job
    is no longer our claim is not written, and its dot must not go)."""
    landed = {int(r["id"]): r["next_dot"] for r in rows}
    return {d.job.id for after, d in carried.items() if landed.get(after) == d.job.id}


async def record_group(
    conn: AsyncConn, owner: int, outcomes: list[Outcome], dots: list[Dot] | None = None
) -> Recorded:
    """Write many outcomes and mark many dots in one transaction (group commit).

    An id missing from the result lost its claim (rescued or released) and was not written; a
    dot missing must not go.
    """
    dots = dots or []
    if not any(o.transition.suppress for o in outcomes):
        _own_transaction(conn)
        # The common group: one statement, its own transaction on an autocommit connection.
        return await _record_statement(conn, owner, outcomes, dots)
    async with conn.transaction():
        recorded = await _record_statement(conn, owner, outcomes, dots)
        written = recorded.outcomes
        bounced = [o for o in outcomes if o.transition.suppress and o.job.id in written]
        if bounced:
            await conn.execute(
                QUERIES["suppress_bounces"],
                {
                    "emails": [o.job.email for o in bounced],
                    "broadcast_ids": [o.job.broadcast_id for o in bounced],
                    "details": [o.reply.text for o in bounced],
                },
            )
            lowered = [o.job.email.lower() for o in bounced]
            await conn.execute(QUERIES["tag_all_bounced"], {"lowered": lowered})
    return recorded


async def landed_many(
    conn: AsyncConn, owner: int, jobs: list[Job], dotted: list[Job] | None = None
) -> set[int]:
    """After a `record_many` whose commit was never acknowledged: the ids whose outcome landed,
    and of `dotted` (the group's dots) those whose mark landed.

    An outcome landed if its row is no longer our claim at this attempt yet still names us as
    owner (an outcome keeps the owner; a rescue or release clears it). A mark landed if the row
    is still our claim at this attempt with its mark on its row (`dot_at`, which a claim
    clears) or on an outcome of ours written since its claim (`next_dot`). The group is one
    transaction, so either every row that matched its fence landed, or none did. (A job is
    never both an outcome and a dot of one group: the recorder drops such a mark.)
    """
    dotted = dotted or []
    ids = [j.id for j in jobs] + [j.id for j in dotted]
    cur = await conn.execute(QUERIES["read_back_many"], {"ids": ids})
    rows = {int(r["id"]): r for r in await cur.fetchall()}
    found = set()
    for job in jobs:
        row = rows.get(job.id)
        if row is None or row["owner"] != owner:
            continue
        if row["status"] != "sending" or row["attempts"] != job.attempts:
            found.add(job.id)
    for job in dotted:
        row = rows.get(job.id)
        if row is None or row["owner"] != owner or row["attempts"] != job.attempts:
            continue
        if row["status"] == "sending" and row["dotted"]:
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
        await conn.execute(QUERIES["release"], params)


async def release_orphans(conn: AsyncConn, owner: int, held: list[int]) -> int:
    """Give back claims of `owner` that no sender holds (a claim whose reply was lost)."""
    cur = await conn.execute(QUERIES["release_orphans"], {"owner": owner, "held": held})
    return cur.rowcount


async def rescue(
    conn: AsyncConn,
    dead: list[int],
    *,
    hold: bool = True,
    logged: Mapping[int, Collection[tuple[int, int]]] | None = None,
) -> int:
    """Return the jobs of dead owners as suspects, or (`hold`) those whose dot went as
    unconfirmed (jobs.sql, rescue); the number rescued.

    `logged`: for the dead owners whose dot log was read (delivery/dotlog.py), the (job id,
    attempt) of each final dot they were about to write: a marked job of theirs not among them
    never had its dot written."""
    if not dead:
        return 0
    logged = logged or {}
    went = [dot for dots in logged.values() for dot in dots]
    params = {
        "dead": dead,
        "alone_limit": SUSPECT_DEATHS,
        "hold": hold,
        "logged": sorted(logged),
        "went_ids": [job for job, _ in went],
        "went_attempts": [attempt for _, attempt in went],
    }
    cur = await conn.execute(QUERIES["rescue"], params)
    return cur.rowcount


# ----- Broadcast and campaign: running, paused, finished, cancelled -----


async def finish(conn: AsyncConn) -> list[int]:
    """Mark finished every running broadcast with nothing unfinished; the campaigns now sent."""
    cur = await conn.execute(QUERIES["finish"])
    return [int(r["id"]) for r in await cur.fetchall()]


def finish_sync(conn: Conn) -> list[int]:
    """`finish` on a blocking connection (`campaign status` finishes before it counts)."""
    return [int(r["id"]) for r in conn.execute(QUERIES["finish"]).fetchall()]


async def pause_for_sender_fault(conn: AsyncConn, broadcast_id: int, reason: str) -> None:
    """Pause a running broadcast (and so its campaign) after replies about us."""
    params = {"broadcast_id": broadcast_id, "reason": reason}
    await conn.execute(QUERIES["pause_for_sender_fault"], params)


async def note_sender_fault(conn: AsyncConn, broadcast_id: int, reason: str) -> None:
    """Keep the latest reply about us on the broadcast (`campaign status` shows it)."""
    await conn.execute(QUERIES["note_sender_fault"], {"id": broadcast_id, "reason": reason})


def set_running(conn: Conn, broadcast_id: int, run: bool) -> None:
    """Resume (`run`) a paused broadcast or pause a running one; its campaign follows.

    Resuming lets jobs held back by replies about us go at once and wakes workers; pausing
    asks workers to give back the claims they have not started. In the caller's transaction.
    """
    frm, to = ("paused", "running") if run else ("running", "paused")
    conn.execute(QUERIES["set_running"], {"b": broadcast_id, "from": frm, "to": to})
    if run:
        conn.execute(QUERIES["hurry_sender_faults"], {"b": broadcast_id})
        wake(conn)
    else:
        _stop(conn, broadcast_id)


@dataclass(frozen=True)
class Cancelled:
    """What a cancel did at once."""

    jobs: int  # jobs cancelled now
    held: int  # jobs workers held at that moment (their outcome lands, or they come back)


def cancel(conn: Conn, campaign: Campaign) -> Cancelled:
    """Cancel the locked `campaign`: a draft alone, else its broadcast and every job not yet
    claimed (the campaign follows its broadcast). In the caller's transaction."""
    if campaign.broadcast_id is None:
        conn.execute(QUERIES["cancel_draft"], {"c": campaign.id})
        return Cancelled(0, 0)
    bid = campaign.broadcast_id
    conn.execute(QUERIES["cancel_broadcast"], {"b": bid})
    n = conn.execute(QUERIES["cancel_jobs"], {"b": bid}).rowcount
    held = conn.execute(QUERIES["held_jobs"], {"b": bid}).fetchone()
    _stop(conn, bid)
    return Cancelled(n, int(held["n"]) if held else 0)


def bump_generation(conn: Conn, broadcast_id: int) -> datetime | None:
    """Lock the broadcast and mark that jobs move back from a final state (so a `finish` that
    read the queue before cannot finish it); when retention purged it, the time it did."""
    row = conn.execute(QUERIES["bump_generation"], {"b": broadcast_id}).fetchone()
    return None if row is None else row["purged_at"]


def requeue_failed(conn: Conn, broadcast_id: int) -> int:
    """Retry-failed: failed jobs of unsuppressed addresses back to pending; how many.

    A finished broadcast with work again runs again (its campaign `sending`) in the same
    transaction, and workers are woken. Call after `bump_generation`, in its transaction.
    """
    n = conn.execute(QUERIES["requeue_failed"], {"b": broadcast_id}).rowcount
    if n:
        conn.execute(QUERIES["reopen"], {"b": broadcast_id})
        wake(conn)
    return n


def resend_unconfirmed(
    conn: Conn, broadcast_id: int, ids: list[int] | None = None, by: str = "person"
) -> int:
    """A person's choice, or a source's word that the relay never took them (`by`, issue 41):
    the broadcast's unconfirmed jobs (or those of `ids`) go again (same Message-ID); how many.
    Workers are woken. In the caller's transaction."""
    params = {"b": broadcast_id, "ids": ids, "by": by}
    n = conn.execute(QUERIES["resend_unconfirmed"], params).rowcount
    if n:
        wake(conn)
    return n


def confirm(conn: Conn, broadcast_id: int, ids: list[int] | None = None, by: str = "person") -> int:
    """A person's word from the relay's log, or a source's (`by`, issue 41): the broadcast's
    unconfirmed jobs (or those of `ids`) went; how many are sent now. In the caller's
    transaction."""
    params = {"b": broadcast_id, "ids": ids, "by": by}
    return conn.execute(QUERIES["confirm"], params).rowcount


def confirm_delivered(
    conn: Conn, broadcast_id: int, subscriber_id: int, message_id: str, by: str
) -> int | None:
    """A provider's signed delivery event names this job (its Message-ID's token checked by
    the caller): if it is unconfirmed it is sent now; its id, or None (any other status is
    left alone). In the caller's transaction."""
    params = {"b": broadcast_id, "s": subscriber_id, "m": message_id, "by": by}
    row = conn.execute(QUERIES["confirm_delivered"], params).fetchone()
    return None if row is None else int(row["id"])


@dataclass(frozen=True)
class Unconfirmed:
    """A job whose final dot went and whose outcome is unknown: when, where, from whom."""

    id: int
    email: str
    message_id: str
    worker_id: int | None
    dot_at: datetime | None
    relay: str | None
    claimed_at: datetime | None = None


def unconfirmed_jobs(conn: Conn, broadcast_id: int, limit: int = 100) -> list[Unconfirmed]:
    """Up to `limit` unconfirmed jobs of a broadcast, oldest dot first."""
    rows = conn.execute(QUERIES["unconfirmed_jobs"], {"b": broadcast_id, "limit": limit})
    return [
        Unconfirmed(
            int(r["id"]),
            r["email"],
            r["message_id"],
            None if r["owner"] is None else int(r["owner"]),
            r["dot_at"],
            r["dot_relay"],
            r["claimed_at"],
        )
        for r in rows
    ]


@dataclass(frozen=True)
class Note:
    """What one source said of one unconfirmed job at the last reconcile (issue 41)."""

    job_id: int
    source: str
    said: str  # accepted | not accepted | cannot tell
    detail: str
    noted_at: datetime | None = None


def note_reconcile(conn: Conn, broadcast_id: int, notes: list[Note]) -> None:
    """Keep what each source said of each job (replacing its last word), and forget the notes
    of the broadcast's jobs that are no longer unconfirmed. In the caller's transaction."""
    with conn.cursor() as cur:
        cur.executemany(
            QUERIES["note_reconcile"],
            [
                {"b": broadcast_id, "job": n.job_id, "source": n.source}
                | {"said": n.said, "detail": n.detail}
                for n in notes
            ],
        )
    conn.execute(QUERIES["forget_settled_notes"], {"b": broadcast_id})


def reconcile_notes(conn: Conn, broadcast_id: int) -> list[Note]:
    """What each source said of the broadcast's jobs that are still unconfirmed."""
    rows = conn.execute(QUERIES["reconcile_notes"], {"b": broadcast_id})
    return [
        Note(int(r["job_id"]), r["source"], r["said"], r["detail"], r["noted_at"]) for r in rows
    ]


# ----- Erasure -----


class ErasureInFlight(Exception):
    """A job of the subscriber is `sending`: its outcome must land before they are erased."""


@dataclass(frozen=True)
class ErasedJobs:
    """What `erase_jobs` did: jobs that now hold the stand-in, and those cancelled by it."""

    jobs: int
    cancelled: int


def erase_jobs(conn: Conn, subscriber_id: int, stand_in: str, local_part: str) -> ErasedJobs:
    """Take the address out of every job of `subscriber_id` (it becomes `stand_in`), cancelling
    those not sent yet, in the caller's transaction. Fenced against the enqueue (erase_fence)
    and the claim (erase_hold); ErasureInFlight, changing nothing, while one is `sending`."""
    conn.execute(QUERIES["erase_fence"], {"key": CHUNK_LOCK[0], "sub": CHUNK_LOCK[1]})
    held = conn.execute(QUERIES["erase_hold"], {"s": subscriber_id}).fetchall()
    if any(r["status"] == "sending" for r in held):
        raise ErasureInFlight(subscriber_id)
    if not held:
        return ErasedJobs(0, 0)
    rows = conn.execute(
        QUERIES["erase_jobs"], {"s": subscriber_id, "stand_in": stand_in, "local": local_part}
    ).fetchall()
    cancelled = sum(1 for r in held if r["status"] in ("pending", "retry", "unconfirmed"))
    return ErasedJobs(len(rows), cancelled)


# ----- Scheduled drafts -----


def schedule_draft(conn: Conn, campaign_id: int, at: datetime | None) -> None:
    """Send draft `campaign_id` at `at` (None: unschedule)."""
    conn.execute(QUERIES["schedule_draft"], {"at": at, "c": campaign_id})


def due_drafts(conn: Conn, limit: int) -> list[int]:
    """The due drafts this scheduler could lock (for its transaction); their ids."""
    return [int(r["id"]) for r in conn.execute(QUERIES["due_drafts"], {"limit": limit})]


def give_up_schedule(conn: Conn, campaign_id: int, reason: str) -> None:
    """A due draft that could not be sent: unscheduled, with the reason kept."""
    conn.execute(QUERIES["give_up_schedule"], {"c": campaign_id, "reason": reason})


# ----- Retention -----


async def lock_expired(conn: AsyncConn, days: int) -> int | None:
    """Lock one ended broadcast past `days` of retention whose counts are not frozen; its id."""
    row = await (await conn.execute(QUERIES["expired"], {"days": days})).fetchone()
    return None if row is None else int(row["id"])


async def freeze(conn: AsyncConn, broadcast_id: int, counts: dict[str, Any]) -> None:
    """Freeze the locked broadcast's counts before any of its jobs is deleted."""
    await conn.execute(QUERIES["freeze"], {"b": broadcast_id, "counts": Jsonb(counts)})


async def delete_batch(conn: AsyncConn, n: int) -> int:
    """Delete up to n jobs of frozen broadcasts, in a transaction of their own; how many."""
    async with conn.transaction():
        cur = await conn.execute(QUERIES["delete_batch"], {"n": n})
        return cur.rowcount
