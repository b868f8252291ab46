"""The real retry schedule, driven through run times instead of sleeping.

A recipient that always answers 451 must wait 30 s, 2 min, 8 min, 30 min and 1 h before its
five retries, and fail as exhausted after the fifth; then nothing ever tries it again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from senddock.campaigns import status
from senddock.testing import Catcher, Fault
from support import Conn, ThreadWorker, send_campaign, wait_until

DEFAULT_SCHEDULE = "30,120,480,1800,3600"
WAITS = [30, 120, 480, 1800, 3600]  # seconds before retry 1..5


def always_deferred(_: str) -> Fault:
    return Fault.defer_rcpt(attempts=None)


def the_job(conn: Conn, bid: int) -> dict[str, Any]:
    row = conn.execute("SELECT * FROM broadcast_jobs WHERE broadcast_id = %s", (bid,)).fetchone()
    assert row is not None
    return row


def waiting_after(conn: Conn, bid: int, attempts: int) -> Callable[[], bool]:
    """True once the job has failed attempt `attempts` and waits for its retry."""

    def check() -> bool:
        row = the_job(conn, bid)
        return bool(row["status"] == "retry" and row["attempts"] == attempts)

    return check


def test_a_recipient_that_always_defers_waits_the_real_schedule_then_fails_exhausted(
    conn: Conn, db_url: str
) -> None:
    address = "ann@example.com"
    with Catcher(fault_for=always_deferred) as catcher:
        cid, bid = send_campaign(conn, "news", [address])
        with ThreadWorker(db_url, catcher.url, concurrency=1, retry_schedule=DEFAULT_SCHEDULE):
            for attempt, wait in enumerate(WAITS, start=1):
                assert wait_until(waiting_after(conn, bid, attempt), 30), the_job(conn, bid)
                row = the_job(conn, bid)
                assert (row["last_stage"], row["last_code"]) == ("rcpt", 451)
                assert row["failure"] is None
                assert catcher.attempts_by_rcpt[address] == attempt
                scheduled = row["run_at"] - row["updated_at"]
                assert abs(scheduled - timedelta(seconds=wait)) < timedelta(seconds=1), (
                    f"retry {attempt} scheduled {scheduled} ahead, want {wait} s"
                )
                # Time passes: the retry is due now.
                conn.execute("UPDATE broadcast_jobs SET run_at = now() WHERE id = %s", (row["id"],))

            # The sixth attempt (fifth retry) fails too: the budget is spent.
            assert wait_until(lambda: the_job(conn, bid)["status"] == "failed", 30)
            row = the_job(conn, bid)
            assert (row["failure"], row["attempts"]) == ("exhausted", 6)
            assert (row["last_stage"], row["last_code"], row["sent_at"]) == ("rcpt", 451, None)
            assert catcher.attempts_by_rcpt[address] == 6

            # Never tried again, even once its run time has come.
            conn.execute("UPDATE broadcast_jobs SET run_at = now() WHERE id = %s", (row["id"],))
            assert wait_until(lambda: status(conn, cid).status == "sent", 30)
            before = catcher.connections
            time.sleep(1.5)  # several claim rounds of the idle worker
            assert catcher.attempts_by_rcpt[address] == 6
            assert catcher.connections == before
            again = the_job(conn, bid)
            assert (again["status"], again["attempts"]) == ("failed", 6)

        assert catcher.received_count() == 0
        assert conn.execute("SELECT count(*) AS n FROM suppressions").fetchone() == {"n": 0}
        st = status(conn, cid)
        assert (st.counts.failed, st.counts.exhausted, st.counts.sent) == (1, 1, 0)
