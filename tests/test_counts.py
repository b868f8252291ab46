"""Counts are exact at every moment, and a campaign is `sent` only when nothing is left.

The test samples `status()` as fast as it can while a real worker drains 2,000 recipients.
"""

from __future__ import annotations

import time

from senddock.campaigns import CampaignStatus, broadcast, cancel, retry_failed, status
from senddock.queue.counts import Counts, counts_of
from senddock.testing import Catcher
from support import Conn, ThreadWorker, send_campaign, unfinished, wait_until

N = 2000


def job_count(conn: Conn, bid: int) -> int:
    row = conn.execute(
        "SELECT count(*) AS n FROM broadcast_jobs WHERE broadcast_id = %s", (bid,)
    ).fetchone()
    assert row is not None
    return int(row["n"])


def test_counts_move_while_sending_and_the_campaign_is_sent_only_at_the_end(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    emails = [f"user{i}@example.com" for i in range(N)]
    cid, bid = send_campaign(conn, "news", emails)
    first = status(conn, cid)
    assert (first.status, first.counts.total, first.counts.pending, first.counts.sent) == (
        "sending",
        N,
        N,
        0,
    )

    samples: list[CampaignStatus] = []
    resent_mid_way = False
    with ThreadWorker(db_url, catcher.url, concurrency=2):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            st = status(conn, cid)
            samples.append(st)
            if st.status == "sent":
                break
            if not resent_mid_way and 0 < st.counts.sent < N:
                # Sending the same campaign again while it drains creates nothing new.
                assert broadcast(conn, cid) == (bid, N, False)
                assert job_count(conn, bid) == N
                resent_mid_way = True
            time.sleep(0.005)
    assert samples[-1].status == "sent", samples[-1]

    last_sent = 0
    for st in samples:
        unsettled = st.counts.pending + st.counts.sending + st.counts.retry
        assert st.counts.total == N
        assert st.counts.total == unsettled + st.counts.sent + st.counts.failed, st
        assert st.counts.sent >= last_sent, (last_sent, st)
        last_sent = st.counts.sent
        assert st.status in ("sending", "sent"), st
        if st.status == "sent":
            assert unsettled == 0, st
    mid_way = [st for st in samples if 0 < st.counts.sent < N and st.status == "sending"]
    assert mid_way, "no sample caught the campaign part-way through"
    assert resent_mid_way

    done = samples[-1].counts
    assert (done.sent, done.failed, done.pending, done.sending, done.retry) == (
        N,
        0,
        0,
        0,
        0,
    )
    assert unfinished(conn, bid) == 0
    assert catcher.delivered_once(emails)

    # And again once it is sent: same broadcast, same jobs, nothing sent twice.
    assert broadcast(conn, cid) == (bid, N, False)
    assert job_count(conn, bid) == N
    assert conn.execute("SELECT count(*) AS n FROM broadcasts").fetchone() == {"n": 1}
    assert status(conn, cid).status == "sent"
    assert catcher.delivered_once(emails)


RECOUNT = """
SELECT broadcast_id, count(*) AS total,
       count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'sending') AS sending,
       count(*) FILTER (WHERE status = 'retry') AS retry,
       count(*) FILTER (WHERE status = 'sent') AS sent,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE failure = 'bounced') AS bounced,
       count(*) FILTER (WHERE failure = 'suppressed') AS suppressed,
       count(*) FILTER (WHERE failure = 'exhausted') AS exhausted,
       count(*) FILTER (WHERE failure = 'rejected') AS rejected,
       count(*) FILTER (WHERE status IN ('pending', 'sending', 'retry', 'unconfirmed'))
           AS unfinished
FROM broadcast_jobs GROUP BY broadcast_id
"""


def _agree(conn: Conn) -> dict[int, Counts]:
    """The counters and a recount of the jobs, in one snapshot; they must be equal."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        recount = {
            int(r.pop("broadcast_id")): Counts(**{k: int(v) for k, v in r.items()})
            for r in conn.execute(RECOUNT).fetchall()
        }
        counted = counts_of(conn, list(recount))
    assert counted == recount
    return counted


def test_the_counters_equal_a_recount_of_the_jobs_at_every_moment(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    """Two worker processes' worth of sessions (each its own connections, so its own counter
    slots), bounces, deferrals, a cancel mid-way and retry-failed: every writer moves the
    counters in its own transaction, so a snapshot never sees them differ from the jobs."""
    emails = [f"user{i}@example.com" for i in range(300)]
    emails += [f"bounce-{i}@example.com" for i in range(10)]
    emails += [f"flaky-{i}@example.com" for i in range(10)]
    cid, _ = send_campaign(conn, "news", emails, "news")
    other, _ = send_campaign(conn, "other", [f"o{i}@example.com" for i in range(200)], "other")
    cancelled = False
    with (
        ThreadWorker(db_url, catcher.url, concurrency=3),
        ThreadWorker(db_url, catcher.url, concurrency=3),
    ):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            _agree(conn)
            st = status(conn, other)
            if not cancelled and st.counts.sent > 20:
                cancel(conn, other)
                cancelled = True
            if status(conn, cid).status == "sent" and status(conn, other).counts.sending == 0:
                break
            time.sleep(0.01)
        assert cancelled
        _agree(conn)
        # A person lifts one bounce's suppression: retry-failed sends it again (failed ->
        # pending, then claimed and bounced again, suppressed again).
        conn.execute("DELETE FROM suppressions WHERE email = 'bounce-0@example.com'")
        assert retry_failed(conn, cid) == 1
        _agree(conn)
        assert wait_until(lambda: status(conn, cid).status == "sent", 60)
        counts = _agree(conn)
    done = status(conn, cid)
    assert (done.counts.sent, done.counts.bounced, done.counts.total) == (310, 10, 320), done
    assert sum(c.total for c in counts.values()) == 520
    _agree(conn)
