"""A campaign ends when nothing is left, whatever reports arrive meanwhile (issue 33).

Jobs are claimed and recorded the way a worker does (queue.claim, queue.record_many), a later
bounce is recorded the way the bounce intake does (bounces.store.receive), and `finish` runs
last, so a report always lands between the sends and the finish. Before migration 0026 the
later report's counter was subtracted as a finished job: the first test's campaign stayed
`sending` for good, the second one's finished with a job still pending (never claimed again).
"""

from __future__ import annotations

import asyncio

import psycopg
from psycopg.rows import dict_row

from senddock import queue
from senddock.bounces.store import receive
from senddock.bounces.verp import ReturnPath
from senddock.campaigns import campaigns
from senddock.delivery.outcome import Reply, Transition
from senddock.queue.bounces import SoftLimit
from senddock.queue.counts import count
from support import Conn, jobs, send_campaign
from test_bounce_effects import report

OWNER = 11  # an owner id no live worker has
SENT = Transition("sent")
OK = Reply("data", 250, "2.0.0 queued")
KEY = b"finish-test-key!" * 2
PATH = ReturnPath.parse("bounces.example.org")


def send(db_url: str, n: int) -> list[int]:
    """Claim up to `n` due jobs and record each as sent (the relay said 250): their ids."""

    async def run() -> list[int]:
        async with await psycopg.AsyncConnection.connect(
            db_url, autocommit=True, row_factory=dict_row
        ) as c:
            claimed = await queue.claim(c, OWNER, n)
            written = await queue.record_many(
                c, OWNER, [queue.Outcome(j, SENT, OK) for j in claimed]
            )
            assert written == {j.id for j in claimed}
            return [j.id for j in claimed]

    return asyncio.run(run())


def bounce_later(conn: Conn, bid: int, email: str) -> None:
    """A hard DSN about `email`'s job, quoting its Message-ID, recorded by the bounce intake."""
    job = jobs(conn, bid)[email]
    raw = report("postfix-unknown-user", email, str(job["message_id"]))
    got = receive(conn, "pipe", raw, "b@bounces.example.org", PATH, KEY, SoftLimit(3, 30))
    assert got.matched == 1
    assert count(conn, bid).bounced_later == 1


def finish(conn: Conn) -> list[int]:
    with conn.transaction():
        return queue.finish_sync(conn)


def test_a_later_bounce_before_finish_runs_does_not_keep_a_drained_campaign_open(
    conn: Conn, db_url: str
) -> None:
    emails = ["ada@example.com", "bob@example.com", "cy@example.com"]
    cid, bid = send_campaign(conn, "news", emails)
    assert len(send(db_url, 10)) == 3
    bounce_later(conn, bid, "ada@example.com")

    assert finish(conn) == [cid]
    status = campaigns.status(conn, cid)
    assert (status.status, status.counts.sent, status.counts.pending, status.counts.unfinished) == (
        "sent",
        3,
        0,
        0,
    )
    assert status.counts.bounced_later == 1


def test_a_later_bounce_never_finishes_a_campaign_with_a_job_still_pending(
    conn: Conn, db_url: str
) -> None:
    emails = ["ada@example.com", "bob@example.com"]
    cid, bid = send_campaign(conn, "news", emails)
    [first] = send(db_url, 1)
    sent_to = next(e for e, j in jobs(conn, bid).items() if j["id"] == first)
    bounce_later(conn, bid, sent_to)

    assert finish(conn) == []
    status = campaigns.status(conn, cid)
    assert (status.status, status.counts.sent, status.counts.pending, status.counts.unfinished) == (
        "sending",
        1,
        1,
        1,
    )

    # The job left is still claimable and goes; only then does the campaign end.
    assert len(send(db_url, 10)) == 1
    assert finish(conn) == [cid]
    assert {j["status"] for j in jobs(conn, bid).values()} == {"sent"}
    status = campaigns.status(conn, cid)
    assert (
        status.status,
        status.counts.sent,
        status.counts.pending,
        status.counts.bounced_later,
    ) == (
        "sent",
        2,
        0,
        1,
    )
