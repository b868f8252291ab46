"""A model of the queue's state machine, run against the real queue (issue 33, item 2).

Hypothesis' stateful testing draws random sequences of every operation of the queue layer,
driven as a worker, the bounce intake, a person at the CLI and the cleaner drive them:
enqueue in small chunks, claims by a few owners, every outcome (sent, retry, bounced, rejected,
exhausted, a reply about us, unconfirmed, a late 250, release), marked dots and dots carried on
a sent outcome, a worker's death and its rescue, later reports of every kind (for sent, failed,
pending and unknown jobs, again and out of order), pause, resume, cancel, retry-failed,
confirm and resend of the unconfirmed, a schedule that comes due, retention's purge, a second
broadcast to the same people and `finish` at any point. A plain Python model predicts every
job's row; after every step the rows, the counters (queue.counts) and every surface are
compared with it: `campaign status` (the service, and the real CLI once per run), the API's
campaign detail through a real `senddock serve`, the dashboard's data and /metrics.

Each run starts from an empty database (the tables are emptied; the server's API token stays).
tests/test_queue_model.py runs a bounded number of examples; bench/model_queue.py runs it for
as long as asked. With the `finish` of 9581e16~1 restored (a later report's counter subtracted
as a finished job) this test fails within a few examples (a job left pending in a `sent`
campaign, or a drained campaign that never ends).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import psycopg
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from psycopg.rows import dict_row

from senddock import campaigns, queue
from senddock.bounces.store import receive
from senddock.bounces.verp import ReturnPath
from senddock.campaigns import scheduler
from senddock.campaigns.broadcast import NothingToSend, enqueue_chunk
from senddock.cli import cli
from senddock.db import connect
from senddock.delivery import cleaner
from senddock.delivery.outcome import Reply, Transition, judge, transition
from senddock.queue import Dot, Job, Outcome
from senddock.queue.bounces import SoftLimit
from senddock.queue.counts import (
    FAILURES,
    JOB_STATUSES,
    LATER,
    Counts,
    counts_of,
    shown_status,
)
from senddock.queue.jobs import Transition as Move
from senddock.web import queries
from senddock.web.dashboard.campaign_pages import live_state
from support import Conn, new_campaign, seed_list, send_campaign, senddock, worker_env
from web_support import Server, make_token, start_server

# The module, not the function `senddock.campaigns.broadcast` that the package re-exports.
broadcast_module = importlib.import_module("senddock.campaigns.broadcast")
HERE = Path(__file__).parent / "bounces"
KEY = b"model-queue-test" * 2
PATH = ReturnPath.parse("bounces.example.org")
SOFT = SoftLimit(3, 30)
RELAY = "relay.example.net:25"
# The people every broadcast goes to: one non-ASCII address among them (IDNA domain).
PEOPLE = ["ada@example.org", "zoë@bücher.example", "dee@example.org"]
OWNERS = (1, 2, 3)  # worker ids no live worker has: only rescue() ends their claims
CAMPAIGNS = 2  # a second broadcast to the same people
# Two retry schedules (their length is the budget): FAST retries at once, SLOW waits, so a
# retry is not due until its time comes (or a resume hurries a reply about us).
FAST, SLOW = (0.0, 0.0), (30.0, 120.0)
JOB_FAULT_LIMIT = 2  # replies about us a job takes before it fails as rejected
TABLES = (
    "broadcast_jobs, broadcast_counts, broadcasts, campaigns, list_memberships, lists,"
    " subscribers, suppressions, workers, worker_deaths, bounce_messages, bounce_findings,"
    " bounce_effects, subscription_events, signup_consents"
)
REPLIES = {
    "sent": Reply("data", 250, "2.0.0 queued as 4XyZ"),
    "transient": Reply("rcpt", 451, "4.3.0 try again later"),
    "bounce": Reply("rcpt", 550, "5.1.1 no such user"),
    "rejected": Reply("rcpt", 552, "5.2.2 mailbox full for good"),
    "about us": Reply("mail", 550, "5.7.1 relaying denied"),
    "unconfirmed": Reply("dot", None, "connection lost after the final dot"),
}
# A sample returned message of each kind (tests/bounces), and the address it names.
SAMPLES = {
    "hard": ("postfix-unknown-user", "ada@example.com"),
    "soft": ("mailbox-full", "erin@example.net"),
    "policy": ("spamhaus-block", "gus@example.com"),
    "complaint": ("arf-abuse", "quinn@example.com"),
}
SAMPLE_ID = re.compile(rb"<b42\.s\d+\.ab[a-z]@senddock\.example\.org>")
UNFINISHED = ("pending", "sending", "retry", "unconfirmed")
LIVE = {"running": "sending", "paused": "paused", "finished": "sent", "cancelled": "cancelled"}
COUNT_KEYS = tuple(Counts().as_dict())
# The API's campaign detail has every count but `unfinished` (web/schemas.py CampaignStatus
# lacks it, though it says "the same keys as `campaign status --json`"; reported, issue 33).
API_KEYS = COUNT_KEYS  # the API carries every count, `unfinished` too


def report(kind: str, email: str, message_id: str, nonce: int) -> bytes:
    """A returned message of `kind` about `email`'s message `message_id`; `nonce` makes it a
    distinct message (the intake keeps one copy of the same bytes)."""
    sample, named = SAMPLES[kind]
    raw = (HERE / f"{sample}.eml").read_bytes().replace(named.encode(), email.encode())
    raw = SAMPLE_ID.sub(message_id.encode(), raw)
    return f"X-Model-Nonce: {nonce}\n".encode() + raw.replace(b"\n", b"\r\n")


# ----- The model -----


@dataclass
class MJob:
    """What the model says one job's row holds."""

    id: int
    bid: int
    sid: int
    email: str
    message_id: str
    status: str = "pending"
    failure: str | None = None
    attempts: int = 0
    owner: int | None = None
    sender_faults: int = 0
    deaths: int = 0
    alone_deaths: int = 0
    suspect_claim: bool = False
    dotted: bool = False  # a sending job whose final dot is marked (own row or carried)
    due: bool = True

    def row(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "failure": self.failure,
            "attempts": self.attempts,
            "owner": self.owner,
            "sender_faults": self.sender_faults,
            "deaths": self.deaths,
            "alone_deaths": self.alone_deaths,
            "suspect_claim": self.suspect_claim,
            "dotted": self.dotted if self.status == "sending" else False,
            "due": self.due,
        }


@dataclass
class MBroadcast:
    id: int
    cid: int
    status: str = "running"
    cursor: int = 0  # members enqueued so far (chunks cover members in id order)
    enqueued: bool = False
    frozen: Counts | None = None  # retention purged its jobs; its counts as they were
    aged: bool = False  # ended past retention (until it runs or ends again)
    later: set[tuple[int, str]] = field(default_factory=set)  # (subscriber, kind) counted


@dataclass
class MCampaign:
    id: int
    status: str = "draft"
    bid: int | None = None
    scheduled: bool = False


JOB_ROWS = """
SELECT id, broadcast_id, subscriber_id, email, message_id, status, failure, attempts, owner,
       sender_faults, deaths, alone_deaths, suspect_claim, run_at <= now() AS due,
       status = 'sending' AND (dot_at IS NOT NULL OR EXISTS (
           SELECT 1 FROM senddock_carried_mark(id, owner, claimed_at))) AS dotted
FROM broadcast_jobs ORDER BY id
"""


class QueueModel(RuleBasedStateMachine):
    """The queue and its model; the class attributes are set by `machine()`."""

    db_url = ""
    http: httpx.Client | None = None  # to a real `senddock serve` of this database
    # What the last run ended with, by campaign: (status, counts), for the real CLI's check.
    last: dict[int, tuple[str, dict[str, int]]] = {}  # noqa: RUF012
    steps = 0  # across every run (the bench reports it)
    runs = 0

    def __init__(self) -> None:
        super().__init__()
        type(self).runs += 1
        with connect(self.db_url) as c:
            c.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")
        self.conn: Conn = psycopg.connect(self.db_url, autocommit=True, row_factory=dict_row)
        self.runner = asyncio.Runner()
        self.aconn: psycopg.AsyncConnection[dict[str, Any]] = self.runner.run(
            psycopg.AsyncConnection.connect(self.db_url, autocommit=True, row_factory=dict_row)
        )
        seed_list(self.conn, "news", PEOPLE)
        rows = self.conn.execute("SELECT id, email FROM subscribers ORDER BY id").fetchall()
        self.people: list[tuple[int, str]] = [(int(r["id"]), str(r["email"])) for r in rows]
        self.suppressed: set[str] = set()
        self.soft: Counter[int] = Counter()  # distinct soft reports matched, by subscriber
        self.campaigns: dict[int, MCampaign] = {}
        self.broadcasts: dict[int, MBroadcast] = {}
        self.jobs: dict[int, MJob] = {}
        self.tickets: dict[int, list[Job]] = {o: [] for o in OWNERS}  # what each owner holds
        self.nonce = 0
        self.watch = True
        self.started = False  # the initialize rule ran
        self.expect_new: list[tuple[int, int]] = []  # (broadcast, subscriber) jobs to appear

    # --- helpers ---

    def run(self, coro: Any) -> Any:
        return self.runner.run(coro)

    def one(self, statement: str, *params: Any) -> dict[str, Any]:
        row = self.conn.execute(statement, params).fetchone()
        assert row is not None, statement
        return row

    def eligible(self, email: str) -> bool:
        return email.lower() not in self.suppressed

    def live_broadcasts(self) -> list[MBroadcast]:
        return [b for b in self.broadcasts.values() if b.frozen is None]

    def enqueue_model(self, b: MBroadcast, size: int) -> None:
        """A chunk of `size` members past the cursor: their eligible ones become jobs."""
        members = self.people[b.cursor : b.cursor + size]
        b.cursor += len(members)
        b.enqueued = b.cursor >= len(self.people)
        for sid, email in members:
            if self.eligible(email):
                self.expect_new.append((b.id, sid))

    def adopt_new_jobs(self) -> None:
        """The new rows must be exactly the jobs the model expects; take their ids."""
        known = set(self.jobs)
        rows = [r for r in self.conn.execute(JOB_ROWS).fetchall() if int(r["id"]) not in known]
        got = sorted((int(r["broadcast_id"]), int(r["subscriber_id"])) for r in rows)
        assert got == sorted(self.expect_new), ("enqueued", got, self.expect_new)
        for r in rows:
            self.jobs[int(r["id"])] = MJob(
                int(r["id"]),
                int(r["broadcast_id"]),
                int(r["subscriber_id"]),
                str(r["email"]),
                str(r["message_id"]),
            )
        self.expect_new = []

    def finish_model(self) -> None:
        """What `finish` does, in the model."""
        for b in self.broadcasts.values():
            jobs = [j for j in self.jobs.values() if j.bid == b.id]
            if b.status == "cancelled":
                for j in jobs:
                    if j.status in ("pending", "retry"):
                        j.status = "cancelled"
            elif (
                b.status == "running"
                and b.enqueued
                and b.frozen is None
                and not any(j.status in UNFINISHED for j in jobs)
            ):
                self.set_status(b, "finished")

    def set_status(self, b: MBroadcast, status: str) -> None:
        b.status, b.aged = status, False  # a new end (or none) is a new retention time
        self.campaigns[b.cid].status = LIVE[status]

    def expected_counts(self, b: MBroadcast) -> Counts:
        if b.frozen is not None:
            return b.frozen
        jobs = [j for j in self.jobs.values() if j.bid == b.id]
        by = Counter(j.status for j in jobs)
        failures = Counter(j.failure for j in jobs if j.status == "failed")
        later = Counter(kind for _, kind in b.later)
        return Counts(
            total=len(jobs),
            **{s: by[s] for s in JOB_STATUSES},
            **{f: failures[f] for f in FAILURES},
            **{key: later[kind] for kind, key in LATER.items()},
            unfinished=sum(by[s] for s in UNFINISHED),
        )

    def held(self, owner: int, pick: int) -> Job | None:
        tickets = self.tickets[owner]
        return tickets[pick % len(tickets)] if tickets else None

    def holds(self, owner: int, ticket: Job) -> bool:
        """Does `ticket` still fence its row for an outcome (sending or unconfirmed, same
        owner and attempt)? The model's own answer, never the database's."""
        j = self.jobs.get(ticket.id)
        return (
            j is not None
            and j.status in ("sending", "unconfirmed")
            and j.owner == owner
            and j.attempts == ticket.attempts
        )

    def drop(self, owner: int, ticket: Job) -> None:
        self.tickets[owner] = [t for t in self.tickets[owner] if t != ticket]

    # --- set up ---

    @initialize(
        watch=st.booleans(), send=st.booleans(), first=st.integers(1, 3), rest=st.booleans()
    )
    def start(self, watch: bool, send: bool, first: int, rest: bool) -> None:
        """A first campaign, sent at once (`send`, a first chunk of `first`; with `rest`, the
        other chunks enqueued one by one, as a worker does at once) or left a draft.

        `watch`: read the surfaces that finish (status, the API) after every step, as a
        person watching the page does; else only when a rule looks, so a drained broadcast
        may wait for its finish while other operations happen."""
        self.watch, self.started = watch, True
        self.create()
        if send:
            self.send(0, first)
            while rest and any(not b.enqueued for b in self.broadcasts.values()):
                self.enqueue(0, 1)

    # --- campaigns: create, send, schedule ---

    @precondition(lambda self: len(self.campaigns) < CAMPAIGNS)
    @rule()
    def create(self) -> None:
        cid = new_campaign(self.conn, "news", f"c{len(self.campaigns) + 1}")
        self.campaigns[cid] = MCampaign(cid)

    @precondition(lambda self: bool(self.campaigns))
    @rule(pick=st.integers(0, 9), first=st.integers(1, 3))
    def send(self, pick: int, first: int) -> None:
        c = list(self.campaigns.values())[pick % len(self.campaigns)]
        nobody = not any(self.eligible(e) for _, e in self.people)
        with mock.patch.object(broadcast_module, "FIRST_CHUNK", first):
            try:
                bid, _, created = campaigns.broadcast(self.conn, c.id)
            except NothingToSend:
                assert c.status == "draft" and nobody, ("nothing to send", c)
                return
            except campaigns.CampaignError:
                assert c.status == "cancelled", c
                return
        if c.status != "draft":
            assert not created and bid == c.bid, (c, bid)
            return
        assert created and not nobody, (c, nobody)
        self._started(c, bid, first)

    def _started(self, c: MCampaign, bid: int, first: int, adopt: bool = True) -> None:
        b = MBroadcast(bid, c.id)
        self.broadcasts[bid] = b
        c.bid, c.scheduled = bid, False
        self.set_status(b, "running")
        self.enqueue_model(b, first)
        if adopt:  # (a scheduler pass starts them all first)
            self.adopt_new_jobs()

    @precondition(lambda self: bool(self.campaigns))
    @rule(pick=st.integers(0, 9), unschedule=st.booleans())
    def schedule(self, pick: int, unschedule: bool) -> None:
        c = list(self.campaigns.values())[pick % len(self.campaigns)]
        when = None if unschedule else self.one("SELECT now() + interval '1 hour' AS t")["t"]
        try:
            campaigns.schedule(self.conn, c.id, when)
        except campaigns.CampaignError:
            assert c.status != "draft", c
            return
        assert c.status == "draft", c
        c.scheduled = when is not None

    @precondition(lambda self: any(c.scheduled for c in self.campaigns.values()))
    @rule(first=st.integers(1, 3))
    def schedule_comes_due(self, first: int) -> None:
        """The clock reaches the scheduled drafts' time; the scheduler's pass sends them."""
        self.conn.execute(
            "UPDATE campaigns SET send_at = now() - interval '1 second'"
            " WHERE send_at IS NOT NULL AND status = 'draft'"
        )
        with mock.patch.object(broadcast_module, "FIRST_CHUNK", first):
            done = scheduler.run_due(self.conn)
        due = sorted(c.id for c in self.campaigns.values() if c.scheduled)
        nobody = not any(self.eligible(e) for _, e in self.people)
        assert sorted(done) == ([] if nobody else due), (done, due, nobody)  # same send_at
        for cid in due:
            c = self.campaigns[cid]
            c.scheduled = False
            if not nobody:
                bid = int(
                    self.one("SELECT broadcast_id FROM campaigns WHERE id = %s", cid)[
                        "broadcast_id"
                    ]
                )
                self._started(c, bid, first, adopt=False)
        self.adopt_new_jobs()

    @precondition(lambda self: any(not b.enqueued for b in self.broadcasts.values()))
    @rule(pick=st.integers(0, 9), size=st.integers(1, 3))
    def enqueue(self, pick: int, size: int) -> None:
        open_ = [b for b in self.broadcasts.values() if not b.enqueued]
        b = open_[pick % len(open_)]
        chunk = enqueue_chunk(self.conn, b.id, size)
        assert chunk is not None
        if b.status == "cancelled":
            assert chunk.done and chunk.jobs == 0, chunk
            b.enqueued = True
            return
        self.enqueue_model(b, size)
        assert (chunk.jobs, chunk.done) == (len(self.expect_new), b.enqueued), (chunk, b)
        self.adopt_new_jobs()

    # --- a worker: claim, outcomes, dots, release ---

    @rule(owner=st.sampled_from(OWNERS), n=st.integers(1, 4), suspect=st.booleans())
    def claim(self, owner: int, n: int, suspect: bool) -> None:
        # As a worker does: one suspect at a time a process.
        holds_suspect = any(
            j.suspect_claim and j.status == "sending" and j.owner == owner
            for j in self.jobs.values()
        )
        suspect = suspect and not holds_suspect

        def claimable(j: MJob) -> bool:
            b = self.broadcasts[j.bid]
            return j.status in ("pending", "retry") and j.due and b.status == "running"

        ordinary = {j.id for j in self.jobs.values() if claimable(j) and j.deaths == 0}
        suspects = {j.id for j in self.jobs.values() if claimable(j) and j.deaths > 0}
        claimed = self.run(queue.claim(self.aconn, owner, n, suspect=suspect))
        rows = {int(r["id"]): r for r in self.conn.execute(JOB_ROWS).fetchall()}
        took = {j.id for j in claimed}
        failed = {
            i
            for i in ordinary | suspects
            if rows[i]["status"] == "failed" and rows[i]["failure"] == "suppressed"
        }
        picked = took | failed
        assert picked <= ordinary | suspects, ("claimed what is not claimable", picked)
        assert len(picked & ordinary) == min(n, len(ordinary)), (picked, ordinary, n)
        assert len(picked & suspects) == (min(1, len(suspects)) if suspect else 0)
        for i in failed:
            j = self.jobs[i]
            assert not self.eligible(j.email), ("failed as suppressed, not suppressed", j)
            j.status, j.failure, j.owner = "failed", "suppressed", owner
        for job in claimed:
            j = self.jobs[job.id]
            assert self.eligible(j.email), ("claimed a suppressed address", j)
            j.status, j.attempts, j.owner = "sending", j.attempts + 1, owner
            j.suspect_claim, j.dotted = j.id in suspects, False
            assert job.attempts == j.attempts and job.suspect == j.suspect_claim, (job, j)
            self.tickets[owner].append(job)

    def _written(self, ticket: Job, t: Move) -> None:
        """The model of one outcome that lands."""
        j = self.jobs[ticket.id]
        j.status, j.failure = t.status, t.failure
        j.attempts -= 0 if t.count_attempt else 1
        j.sender_faults += 1 if t.sender_fault else 0
        j.due = t.delay == 0
        if t.suppress:
            self.suppressed.add(j.email.lower())

    @rule(
        owner=st.sampled_from(OWNERS),
        n=st.integers(1, 2),
        verdicts=st.lists(st.sampled_from(sorted(REPLIES)), max_size=2),
    )
    def deliver(self, owner: int, n: int, verdicts: list[str]) -> None:
        """A worker's loop: claim a batch, then one group commit of its outcomes (the
        verdicts in turn, the relay's 250 for the rest), so broadcasts drain within a run."""
        before = len(self.tickets[owner])
        self.claim(owner, n, False)
        batch = self.tickets[owner][before:]
        picks = [
            (before + i, verdicts[i] if i < len(verdicts) else "sent", True)
            for i in range(len(batch))
        ]
        self.record(owner, picks)

    @rule(
        owner=st.sampled_from(OWNERS),
        picks=st.lists(
            st.tuples(st.integers(0, 9), st.sampled_from(sorted(REPLIES)), st.booleans()),
            min_size=1,
            max_size=3,
        ),
    )
    def record(self, owner: int, picks: list[tuple[int, str, bool]]) -> None:
        """One group commit of outcomes (a late one, after a rescue, included: it lands only
        on a row still fenced for this owner and attempt)."""
        chosen: dict[int, tuple[Job, str, bool]] = {}
        for pick, verdict, fast in picks:
            t = self.held(owner, pick)
            if t is not None:
                chosen.setdefault(t.id, (t, verdict, fast))
        if not chosen:
            return
        outcomes = []
        for ticket, verdict, fast in chosen.values():
            reply = REPLIES[verdict]
            backoff = FAST if fast else SLOW
            move = transition(
                judge(reply), ticket.attempts, ticket.sender_faults, backoff, JOB_FAULT_LIMIT
            )
            outcomes.append(Outcome(ticket, move, reply))
        expected = {o.job.id for o in outcomes if self.holds(owner, o.job)}
        written = self.run(queue.record_many(self.aconn, owner, outcomes))
        assert written == expected, ("outcomes written", written, expected)
        for o in outcomes:
            if o.job.id in expected:
                self._written(o.job, o.transition)
            self.drop(owner, o.job)

    @rule(owner=st.sampled_from(OWNERS), pick=st.integers(0, 9))
    def mark_dot(self, owner: int, pick: int) -> None:
        """The final dot of a held job is about to go: its mark, on its own row."""
        t = self.held(owner, pick)
        if t is None:
            return
        j = self.jobs[t.id]
        fenced = j.status == "sending" and j.owner == owner and j.attempts == t.attempts
        got = self.run(queue.record_group(self.aconn, owner, [], [Dot(t, RELAY)]))
        assert got.dots == ({t.id} if fenced else set()), ("dot marked", got, j)
        j.dotted = j.dotted or fenced

    @rule(owner=st.sampled_from(OWNERS), a=st.integers(0, 9), b=st.integers(0, 9))
    def sent_carrying_a_dot(self, owner: int, a: int, b: int) -> None:
        """A 250 for one job, carrying the mark of its session's next dot (0025)."""
        first, nxt = self.held(owner, a), self.held(owner, b)
        if first is None or nxt is None or first.id == nxt.id:
            return
        lands = self.holds(owner, first)
        n = self.jobs[nxt.id]
        fenced = n.status == "sending" and n.owner == owner and n.attempts == nxt.attempts
        outcome = Outcome(first, Transition("sent"), REPLIES["sent"])
        got = self.run(
            queue.record_group(self.aconn, owner, [outcome], [Dot(nxt, RELAY, after=first.id)])
        )
        assert got.outcomes == ({first.id} if lands else set()), (got, first)
        # Invariant 4: a dot reported marked is a claim still held; only then may it go.
        assert got.dots == ({nxt.id} if lands and fenced else set()), ("dot may go", got, n)
        if lands:
            self._written(first, outcome.transition)
            n.dotted = n.dotted or fenced
        self.drop(owner, first)

    @rule(owner=st.sampled_from(OWNERS), picks=st.lists(st.integers(0, 9), max_size=3))
    def release(self, owner: int, picks: list[int]) -> None:
        """Claims never started go back (shutdown, pause, cancel)."""
        chosen = {t.id: t for p in picks if (t := self.held(owner, p)) is not None}
        self.run(queue.release(self.aconn, owner, list(chosen.values())))
        for t in chosen.values():
            j = self.jobs[t.id]
            if j.status == "sending" and j.owner == owner and j.attempts == t.attempts:
                cancelled = self.broadcasts[j.bid].status == "cancelled"
                j.attempts -= 1
                j.status = "cancelled" if cancelled else "pending" if j.attempts == 0 else "retry"
                j.owner, j.due = None, True
            self.drop(owner, t)

    @rule(owner=st.sampled_from(OWNERS), forget=st.booleans())
    def rescue(self, owner: int, forget: bool) -> None:
        """`owner` is found dead (hold: a dotted job becomes unconfirmed). `forget`: it was
        dead indeed; else it was only cut off and may still record what it held."""
        n = self.run(queue.rescue(self.aconn, [owner]))
        mine = [j for j in self.jobs.values() if j.status == "sending" and j.owner == owner]
        assert n == len(mine), (n, mine)
        for j in mine:
            poison = j.suspect_claim and j.alone_deaths + 1 >= queue.SUSPECT_DEATHS
            if j.dotted:
                j.status = "unconfirmed"
            else:
                j.status = "failed" if poison else "retry"
                j.failure = "rejected" if poison else None
                j.attempts -= 0 if poison else 1
                j.deaths += 1
                j.alone_deaths += 1 if j.suspect_claim else 0
                j.owner = None
            j.suspect_claim, j.dotted, j.due = False, False, True
        if forget:
            self.tickets[owner] = []

    # --- what comes back later ---

    @precondition(lambda self: bool(self.broadcasts))
    @rule(
        kind=st.sampled_from(sorted(SAMPLES)),
        pick=st.integers(0, 99),
        about=st.sampled_from(["job", "job", "job", "job", "unknown", "forged"]),
    )
    def later_report(self, kind: str, pick: int, about: str) -> None:
        """A DSN or complaint quoting our Message-ID, recorded by the bounce intake: about a
        job in any state, a job that does not exist, or a forged token."""
        self.nonce += 1
        jobs = list(self.jobs.values())
        b = list(self.broadcasts.values())[pick % len(self.broadcasts)]
        if about == "job" and jobs:
            j = jobs[pick % len(jobs)]
            email, mid, match = j.email, j.message_id, j
        else:
            sid, email = self.people[pick % len(self.people)]
            token = self.conn.execute(
                "SELECT message_token AS t, message_domain AS d FROM broadcasts WHERE id = %s",
                (b.id,),
            ).fetchone()
            assert token is not None
            if about == "forged":
                mid = f"<sd.{b.id}.{sid}.{token['t']}x@{token['d']}>"
            else:
                mid = f"<sd.{b.id}.{sid + 1000}.{token['t']}@{token['d']}>"
            match = None
        raw = report(kind, email, mid, self.nonce)
        got = receive(self.conn, "pipe", raw, "b@bounces.example.org", PATH, KEY, SOFT)
        assert (got.new, got.findings) == (True, 1), got
        assert got.matched == (1 if match else 0), (got, match, mid)
        if match is None:
            return
        mb = self.broadcasts[match.bid]
        mb.later.add((match.sid, kind))
        if kind in ("hard", "complaint"):
            self.suppressed.add(match.email.lower())
        elif kind == "soft":
            self.soft[match.sid] += 1
            if self.soft[match.sid] >= SOFT.count:
                self.suppressed.add(match.email.lower())

    # --- a person: pause, resume, cancel, retry-failed, confirm, resend ---

    def _campaign(self, pick: int) -> MCampaign:
        return list(self.campaigns.values())[pick % len(self.campaigns)]

    @precondition(lambda self: bool(self.campaigns))
    @rule(pick=st.integers(0, 9), run=st.booleans())
    def pause_or_resume(self, pick: int, run: bool) -> None:
        c = self._campaign(pick)
        try:
            (campaigns.resume if run else campaigns.pause)(self.conn, c.id)
        except campaigns.CampaignError:
            assert c.status != ("paused" if run else "sending"), c
            return
        assert c.status == ("paused" if run else "sending"), c
        assert c.bid is not None
        b = self.broadcasts[c.bid]
        self.set_status(b, "running" if run else "paused")
        if run:  # jobs held back by replies about us may go at once
            for j in self.jobs.values():
                if j.bid == b.id and j.status == "retry" and j.sender_faults > 0:
                    j.due = True

    @precondition(lambda self: bool(self.broadcasts))
    @rule(pick=st.integers(0, 9))
    def pause_for_sender_fault(self, pick: int) -> None:
        """A worker saw replies about us several times in a row."""
        b = list(self.broadcasts.values())[pick % len(self.broadcasts)]
        self.run(queue.pause_for_sender_fault(self.aconn, b.id, "550 5.7.1 relaying denied"))
        if b.status == "running":
            self.set_status(b, "paused")

    @precondition(lambda self: bool(self.campaigns))
    @rule(pick=st.integers(0, 9))
    def cancel(self, pick: int) -> None:
        c = self._campaign(pick)
        try:
            campaigns.cancel(self.conn, c.id)
        except campaigns.CampaignError:
            assert c.status in ("sent", "cancelled"), c
            return
        assert c.status not in ("sent", "cancelled"), c
        if c.bid is None:
            c.status, c.scheduled = "cancelled", False
            return
        b = self.broadcasts[c.bid]
        self.set_status(b, "cancelled")
        for j in self.jobs.values():
            if j.bid == b.id and j.status in ("pending", "retry"):
                j.status = "cancelled"

    @precondition(lambda self: bool(self.campaigns))
    @rule(pick=st.integers(0, 9))
    def retry_failed(self, pick: int) -> None:
        c = self._campaign(pick)
        try:
            n = campaigns.retry_failed(self.conn, c.id)
        except campaigns.CampaignError:
            b = self.broadcasts.get(c.bid) if c.bid else None
            assert b is None or b.status == "cancelled" or b.frozen is not None, (c, b)
            return
        assert c.bid is not None
        b = self.broadcasts[c.bid]
        assert b.status != "cancelled" and b.frozen is None, b
        again = [
            j
            for j in self.jobs.values()
            if j.bid == b.id and j.status == "failed" and self.eligible(j.email)
        ]
        assert n == len(again), (n, again)
        for j in again:
            j.status, j.failure, j.attempts, j.sender_faults = "pending", None, 0, 0
            j.owner, j.due = None, True
        if again and b.status == "finished":
            self.set_status(b, "running")

    @precondition(lambda self: bool(self.campaigns))
    @rule(pick=st.integers(0, 9), resend=st.booleans())
    def unconfirmed_decision(self, pick: int, resend: bool) -> None:
        """A person confirms from the relay's log, or resends, the unconfirmed recipients."""
        c = self._campaign(pick)
        act = campaigns.resend_unconfirmed if resend else campaigns.confirm
        try:
            n = act(self.conn, c.id)
        except campaigns.CampaignError:
            assert c.bid is None or (resend and c.status == "cancelled"), c
            return
        assert c.bid is not None and not (resend and c.status == "cancelled"), c
        held = [j for j in self.jobs.values() if j.bid == c.bid and j.status == "unconfirmed"]
        assert n == len(held), (n, held)
        for j in held:
            if resend:
                j.status = "pending" if j.attempts - 1 <= 0 else "retry"
                j.attempts, j.owner, j.due = max(j.attempts - 1, 0), None, True
            else:
                j.status = "sent"
        if held and not resend:
            self.finish_model()  # confirm finishes what it completed

    # --- maintenance ---

    @rule()
    def finish(self) -> None:
        with self.conn.transaction():
            done = queue.finish_sync(self.conn)
        before = {c.id for c in self.campaigns.values() if c.status == "sent"}
        self.finish_model()
        after = {c.id for c in self.campaigns.values() if c.status == "sent"}
        assert set(done) == after - before, (done, before, after)

    @precondition(lambda self: bool(self.broadcasts))
    @rule(pick=st.integers(0, 9))
    def purge(self, pick: int) -> None:
        """Retention: one broadcast's end is past retention (if it ended); the cleaner freezes
        and deletes every such broadcast with nothing unfinished."""
        b = list(self.broadcasts.values())[pick % len(self.broadcasts)]
        if b.status in ("finished", "cancelled") and b.frozen is None:
            self.conn.execute(
                "UPDATE broadcasts SET finished_at = now() - interval '91 days' WHERE id = %s",
                (b.id,),
            )
            b.aged = True
        deleted = self.run(cleaner.clean(self.aconn, 90, 1000))
        doomed = [
            d
            for d in self.broadcasts.values()
            if d.aged and d.frozen is None and self.expected_counts(d).finished
        ]
        mine = [i for i, j in self.jobs.items() if any(j.bid == d.id for d in doomed)]
        assert deleted == len(mine), (deleted, mine)
        for d in doomed:
            d.frozen = self.expected_counts(d)
            row = self.one("SELECT final_counts FROM broadcasts WHERE id = %s", d.id)
            frozen = {k: v for k, v in row["final_counts"].items() if k in COUNT_KEYS}
            assert frozen == d.frozen.as_dict(), (frozen, d.frozen)
        for i in mine:
            del self.jobs[i]

    @rule()
    def look(self) -> None:
        """A person reads the campaign's status (which finishes what is done)."""
        self.check_surfaces(finishing=True)

    # --- invariants ---

    @invariant()
    def rows_counts_and_surfaces_agree(self) -> None:
        if not self.started:
            return  # before the initialize rule
        type(self).steps += 1
        self.check_rows()
        self.check_surfaces(finishing=self.watch)

    def check_rows(self) -> None:
        rows = {int(r["id"]): r for r in self.conn.execute(JOB_ROWS).fetchall()}
        assert set(rows) == set(self.jobs), ("jobs", sorted(rows), sorted(self.jobs))
        for i, j in self.jobs.items():
            got = {k: rows[i][k] for k in j.row()}
            assert got == j.row(), ("job", i, j.email, got, j.row())
        ids = list(self.broadcasts)
        real = counts_of(self.conn, ids)
        for bid, b in self.broadcasts.items():
            # The counters equal a recount of the rows (the model is the rows: checked above),
            # and after a purge the counts as they were frozen.
            assert real[bid] == self.expected_counts(b), ("counts", bid, real[bid], b)
        stored = self.conn.execute("SELECT id, status FROM broadcasts").fetchall()
        assert {int(r["id"]): r["status"] for r in stored} == {
            bid: b.status for bid, b in self.broadcasts.items()
        }
        for b in self.broadcasts.values():
            if b.status == "finished":  # invariant 8: finished only when nothing is left
                cnt = self.expected_counts(b)
                assert b.enqueued and cnt.finished, ("finished with work left", b, cnt)
        # `finish` at this very moment (rolled back, so the run goes on as it was) ends exactly
        # the running broadcasts that are fully enqueued with nothing unfinished.
        with self.conn.transaction(force_rollback=True):
            would = set(queue.finish_sync(self.conn))
        due = {
            b.cid
            for b in self.broadcasts.values()
            if b.status == "running" and b.enqueued and self.expected_counts(b).finished
        }
        assert would == due, ("finish now", would, due)

    def check_surfaces(self, finishing: bool) -> None:
        """Every surface shows the model's counts (those that finish: after the finish)."""
        if finishing:
            with self.conn.transaction():
                queue.finish_sync(self.conn)  # what each of them does first
            self.finish_model()
            for b in self.broadcasts.values():  # finished <=> drained, fully enqueued
                if b.status in ("running", "finished"):
                    done = b.enqueued and self.expected_counts(b).finished
                    assert done == (b.status == "finished"), ("finish", b)
        expected = {
            c.id: (c, Counts() if c.bid is None else self.expected_counts(self.broadcasts[c.bid]))
            for c in self.campaigns.values()
        }
        page, total = queries.campaigns_page(self.conn, None, 50, 0)
        assert total == len(expected)
        rows = {int(r["id"]): r for r in page}
        for cid, (c, cnt) in expected.items():
            shown = {k: rows[cid][k] for k in COUNT_KEYS}
            assert (rows[cid]["status"], shown) == (c.status, cnt.as_dict()), ("dashboard", c)
            assert rows[cid]["done"] == cnt.done
            assert rows[cid]["state"] == shown_status(c.status, cnt), ("dashboard", c)
        if self.http is not None:
            self.check_metrics(sum((cnt for _, cnt in expected.values()), Counts()))
        if not finishing:
            return
        for cid, (c, cnt) in expected.items():
            state = shown_status(c.status, cnt)  # "waiting for a decision" where it applies
            st_ = campaigns.status(self.conn, cid)
            assert (st_.status, st_.counts) == (c.status, cnt)
            assert st_.state == state, ("status", c)
            live = live_state(self.conn, cid, 15.0, chart=False)
            assert (live["status"], live["done"]) == (c.status, cnt.done), ("live", c)
            assert live["state"] == state, ("live", c)
            assert {k: live[k] for k in COUNT_KEYS} == cnt.as_dict(), ("live", c)
            if self.http is not None:
                api = self.http.get(f"/api/v1/campaigns/{cid}")
                assert api.status_code == 200, api.text
                body = api.json()
                shown = {k: body[k] for k in API_KEYS}
                want = {k: v for k, v in cnt.as_dict().items() if k in API_KEYS}
                assert (body["status"], shown) == (c.status, want), ("api", c, body)
                assert body["state"] == state, ("api", c, body)

    def check_metrics(self, cnt: Counts) -> None:
        assert self.http is not None
        text = self.http.get("/metrics").text
        found = {
            m[0]: float(m[1]) for m in re.findall(r"^(senddock_\w+\{[^}]*\}) (\S+)$", text, re.M)
        }

        def value(sample: str) -> float:
            return found.get(sample, 0.0)

        for s in JOB_STATUSES:
            assert value(f'senddock_queue_jobs{{status="{s}"}}') == getattr(cnt, s), (s, text)
        assert value('senddock_messages{outcome="sent"}') == cnt.sent
        assert value('senddock_messages{outcome="cancelled"}') == cnt.cancelled
        for f in FAILURES:
            assert value(f'senddock_messages{{outcome="failed_{f}"}}') == getattr(cnt, f)
        for kind, key in LATER.items():
            assert value(f'senddock_later_reports{{kind="{kind}"}}') == getattr(cnt, key)

    def expected(self) -> dict[int, tuple[str, dict[str, int]]]:
        """Each campaign's status and counts, as the model has them."""
        return {
            c.id: (
                c.status,
                (
                    Counts() if c.bid is None else self.expected_counts(self.broadcasts[c.bid])
                ).as_dict(),
            )
            for c in self.campaigns.values()
        }

    def teardown(self) -> None:
        try:
            if self.started:
                # The CLI's own command (`campaign status --json`, in this process: a process a
                # run would cost a second each here) for every campaign at the end of each run.
                self.finish_model()
                type(self).last = self.expected()
                for cid, want in self.last.items():
                    assert cli_status(self.db_url, cid) == want, ("cli", cid, want)
        finally:
            self.run(self.aconn.close())
            self.runner.close()
            self.conn.close()


def cli_status(db_url: str, cid: int) -> tuple[str, dict[str, int]]:
    """`senddock campaign status <cid> --json` run by the CLI's click command in this process."""
    env = {"SENDDOCK_DATABASE_URL": db_url, "SENDDOCK_SMTP_URL": "smtp://127.0.0.1:1"}
    with mock.patch("signal.signal"):  # the command group's SIGTERM handler is the process's
        done = CliRunner().invoke(cli, ["campaign", "status", str(cid), "--json"], env=env)
    assert done.exit_code == 0, done.output
    shown = json.loads(done.stdout)
    return str(shown["status"]), {k: shown[k] for k in COUNT_KEYS}


def real_cli_status(db_url: str, cid: int) -> tuple[str, dict[str, int]]:
    """The same, from a real `senddock` process."""
    done = senddock(
        worker_env(db_url, "smtp://127.0.0.1:1"), "campaign", "status", str(cid), "--json"
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    return str(shown["status"]), {k: shown[k] for k in COUNT_KEYS}


def machine(db_url: str, http: httpx.Client | None) -> type[QueueModel]:
    """The state machine bound to a database and (for the API and /metrics) a server."""

    class Run(QueueModel):
        pass

    Run.db_url, Run.http = db_url, http
    return Run


@pytest.fixture
def model_server(db_url: str) -> Iterator[Server]:
    """A real `senddock serve` with no workers and no scheduler: it only answers."""
    server = start_server(
        db_url, "smtp://127.0.0.1:1", workers=False, args=("--schedule-every", "0")
    )
    try:
        yield server
    finally:
        server.stop()
        server.log.unlink(missing_ok=True)


def model_settings(examples: int, steps: int, shrink: bool = True) -> settings:
    """Hypothesis' settings for `examples` runs of up to `steps` steps each. Without `shrink`
    a failure shows the whole run (at most `steps` operations): shrinking one here can take
    longer than the suite's timeout; the bench shrinks."""
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,  # nothing written beside the repo; a failure prints its steps
        phases=list(Phase) if shrink else [Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


def test_every_sequence_of_queue_operations_keeps_rows_counts_and_surfaces_exact(
    db_url: str, model_server: Server
) -> None:
    with model_server.client(make_token(db_url)) as http:
        run = machine(db_url, http)
        run_state_machine_as_test(run, settings=model_settings(25, 30, shrink=False))
    assert run.runs >= 25 and run.steps > 0
    # A real `senddock` process reads the last run's campaigns as the model left them.
    for cid, want in run.last.items():
        assert real_cli_status(db_url, cid) == want, ("senddock campaign status", cid)


def test_retention_keeps_a_cancelled_broadcast_until_its_jobs_in_flight_land(
    conn: Conn, db_url: str
) -> None:
    """Found by the model: a cancelled broadcast past retention was purged while a worker
    held one of its jobs, whose outcome then had no row to land on, and its counts turned
    that `sending` job into `pending`. The cleaner now waits until nothing is unfinished."""
    cid, bid = send_campaign(conn, "news", ["ada@example.org", "bob@example.org"])

    async def claim() -> Job:
        async with await psycopg.AsyncConnection.connect(
            db_url, autocommit=True, row_factory=dict_row
        ) as c:
            [job] = await queue.claim(c, 1, 1)
            return job

    async def clean() -> int:
        async with await psycopg.AsyncConnection.connect(
            db_url, autocommit=True, row_factory=dict_row
        ) as c:
            return await cleaner.clean(c, 90, 1000)

    async def land(job: Job) -> set[int]:
        async with await psycopg.AsyncConnection.connect(
            db_url, autocommit=True, row_factory=dict_row
        ) as c:
            sent = Outcome(job, Transition("sent"), REPLIES["sent"])
            return await queue.record_many(c, 1, [sent])

    held = asyncio.run(claim())
    campaigns.cancel(conn, cid)
    age = "UPDATE broadcasts SET finished_at = now() - interval '91 days' WHERE id = %s"
    conn.execute(age, (bid,))
    before = counts_of(conn, [bid])[bid]
    assert (before.sending, before.cancelled) == (1, 1)
    assert asyncio.run(clean()) == 0, "purged while a job was in flight"
    assert counts_of(conn, [bid])[bid] == before
    assert asyncio.run(land(held)) == {held.id}  # the outcome lands
    assert asyncio.run(clean()) == 2  # and now the broadcast goes
    after = counts_of(conn, [bid])[bid]
    assert (after.sent, after.cancelled, after.sending, after.pending) == (1, 1, 0, 0)


def test_a_dot_carried_on_a_late_250_goes_only_while_its_own_claim_holds(
    conn: Conn, db_url: str
) -> None:
    """Found by the model: a worker cut off from the database is rescued (its dotted job
    becomes unconfirmed, its other job goes back to retry); its late 250 still lands on the
    unconfirmed job (as it should), and carries the mark of its session's next dot. That next
    job is no longer its claim: the mark must not be reported as landed, or its dot goes while
    another worker may claim and send the same job."""
    send_campaign(conn, "news", ["ada@example.org", "bob@example.org"])

    async def run() -> tuple[queue.Recorded, list[Job]]:
        async with await psycopg.AsyncConnection.connect(
            db_url, autocommit=True, row_factory=dict_row
        ) as c:
            first, nxt = await queue.claim(c, 1, 2)
            assert (await queue.record_group(c, 1, [], [Dot(first, RELAY)])).dots == {first.id}
            assert await queue.rescue(c, [1]) == 2  # first: unconfirmed; nxt: retry
            late = Outcome(first, Transition("sent"), REPLIES["sent"])
            got = await queue.record_group(c, 1, [late], [Dot(nxt, RELAY, after=first.id)])
            return got, [first, nxt]

    got, (first, nxt) = asyncio.run(run())
    rows = {int(r["id"]): r for r in conn.execute(JOB_ROWS).fetchall()}
    assert rows[first.id]["status"] == "sent"  # the late 250 lands
    assert (rows[nxt.id]["status"], rows[nxt.id]["owner"]) == ("retry", None)
    assert got.outcomes == {first.id}
    assert got.dots == set(), "the dot of a job rescued from us was reported as marked"
