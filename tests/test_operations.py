"""Pause, resume and cancel a broadcast mid-send; list live workers. Counts stay exact."""

from __future__ import annotations

import json
import time

from senddock.campaigns import CampaignStatus, cancel, pause, resume, status
from senddock.testing import Catcher
from support import (
    Conn,
    ThreadWorker,
    paced,
    send_campaign,
    senddock,
    unfinished,
    wait_until,
    worker_env,
)

COUNTED = ("pending", "sending", "retry", "sent", "failed", "cancelled")


def assert_exact(st: CampaignStatus) -> None:
    counts = st.counts.as_dict()
    assert counts["total"] == sum(counts[k] for k in COUNTED), st


def test_pause_stops_new_sends_at_once_and_resume_finishes_everyone_once(
    conn: Conn, db_url: str
) -> None:
    emails = [f"p{i}@example.com" for i in range(1500)]
    with paced() as catcher:
        cid, bid = send_campaign(conn, "news", emails)
        with ThreadWorker(db_url, catcher.url, concurrency=5):
            assert wait_until(lambda: catcher.received_count() >= 200, 60)
            pause(conn, cid)
            at_pause = catcher.received_count()
            # Messages in flight finish; nothing new starts.
            assert wait_until(lambda: status(conn, cid).counts.sending == 0, 10)
            settled = catcher.received_count()
            time.sleep(1.5)
            st = status(conn, cid)
            assert st.status == "paused"
            assert_exact(st)
            assert catcher.received_count() == settled, "a message was sent while paused"
            assert settled - at_pause <= 5 * 2, (at_pause, settled)
            assert (
                st.counts.sent == settled
                and st.counts.pending + st.counts.retry == len(emails) - settled
            )
            resume(conn, cid)
            assert wait_until(lambda: unfinished(conn, bid) == 0, 60)
        counts = catcher.count_by_rcpt()
    assert sorted(counts) == sorted(emails) and set(counts.values()) == {1}
    st = status(conn, cid)
    assert (st.status, st.counts.sent) == ("sent", len(emails))


def test_cancel_mid_send_cancels_the_rest_and_sends_nothing_more(conn: Conn, db_url: str) -> None:
    emails = [f"c{i}@example.com" for i in range(1500)]
    with paced() as catcher:
        cid, bid = send_campaign(conn, "news", emails)
        with ThreadWorker(db_url, catcher.url, concurrency=5):
            assert wait_until(lambda: catcher.received_count() >= 200, 60)
            cancel(conn, cid)
            assert wait_until(lambda: unfinished(conn, bid) == 0, 15)
            settled = catcher.received_count()
            time.sleep(1.5)
            assert catcher.received_count() == settled, "a message was sent after cancel"
        counts = catcher.count_by_rcpt()
    st = status(conn, cid)
    assert st.status == "cancelled"
    assert_exact(st)
    assert st.counts.sent == settled and st.counts.cancelled == len(emails) - settled
    assert set(counts.values()) == {1}
    # Every row agrees with the server: sent rows were received, cancelled rows were not.
    rows = conn.execute(
        "SELECT lower(email) AS e, status FROM broadcast_jobs WHERE broadcast_id = %s", (bid,)
    ).fetchall()
    assert {r["e"] for r in rows if r["status"] == "sent"} == set(counts)


def test_workers_lists_a_live_worker_with_its_heartbeat(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    env = worker_env(db_url, catcher.url)
    with ThreadWorker(db_url, catcher.url, concurrency=3, heartbeat_interval=0.2):
        assert wait_until(
            lambda: bool(json.loads(senddock(env, "workers", "--json").stdout or "[]")), 20
        )
        out = senddock(env, "workers", "--json")
        assert out.returncode == 0, out.stderr
        (w,) = json.loads(out.stdout)
        assert w["concurrency"] == 3 and w["holding"] == 0 and not w["stopping"]
        assert 0 <= w["heartbeat_age"] < 5
        human = senddock(env, "workers")
        assert "worker" in human.stdout and "heartbeat" in human.stdout
    after = senddock(env, "workers", "--json")
    assert json.loads(after.stdout) == [], "a stopped worker is still listed"


def test_cancel_and_pause_of_an_unknown_campaign_fail_in_one_line(
    db_url: str, catcher: Catcher
) -> None:
    env = worker_env(db_url, catcher.url)
    for verb in ("pause", "cancel", "resume"):
        out = senddock(env, "campaign", verb, "424242")
        assert out.returncode != 0
        assert len(out.stderr.strip().splitlines()) == 1 and "424242" in out.stderr
