"""Who got what: every recipient's outcome, and re-queueing the failed ones of a sent campaign."""

from __future__ import annotations

import csv
import io
import threading

from senddock.campaigns import retry_failed, status
from senddock.queue import QUERIES
from senddock.testing import Catcher, Fault, convention_fault
from support import (
    Conn,
    ThreadWorker,
    db,
    jobs,
    new_campaign,
    send_campaign,
    senddock,
    unfinished,
    wait_until,
    worker_env,
)

PEOPLE = ["ada@example.com", "stuck@example.com", "bounce-bob@example.com"]


def test_recipients_shows_each_outcome_and_retry_failed_sends_only_the_unsuppressed_failed(
    db_url: str, conn: Conn, catcher: Catcher
) -> None:
    relay_refuses_stuck = {"on": True}

    def rule(address: str) -> Fault | None:
        if address.startswith("stuck") and relay_refuses_stuck["on"]:
            return Fault.defer_rcpt(attempts=None, reply="451 4.3.0 try later")
        return convention_fault(address)

    catcher.fault_for = rule
    cid, bid = send_campaign(conn, "news", PEOPLE)
    with ThreadWorker(db_url, catcher.url):
        assert wait_until(lambda: status(conn, cid).status == "sent")
    st = status(conn, cid)
    assert (st.counts.sent, st.counts.exhausted, st.counts.bounced) == (1, 1, 1)

    env = worker_env(db_url, catcher.url)
    proc = senddock(env, "campaign", "recipients", str(cid), "--csv")
    assert proc.returncode == 0, proc.stderr
    rows = {r["email"]: r for r in csv.DictReader(io.StringIO(proc.stdout))}
    assert set(rows) == set(PEOPLE)
    by_job = jobs(conn, bid)
    for address, r in rows.items():
        assert r["message_id"] == by_job[address]["message_id"]
        assert int(r["attempts"]) == by_job[address]["attempts"]
    assert (rows["ada@example.com"]["status"], rows["ada@example.com"]["last_code"]) == (
        "sent",
        "250",
    )
    assert rows["ada@example.com"]["sent_at"]
    assert (rows["stuck@example.com"]["status"], rows["stuck@example.com"]["failure"]) == (
        "failed",
        "exhausted",
    )
    assert rows["stuck@example.com"]["attempts"] == "6"
    assert "try later" in rows["stuck@example.com"]["last_reply"]
    assert rows["bounce-bob@example.com"]["failure"] == "bounced"
    assert rows["bounce-bob@example.com"]["last_code"] == "550"
    assert not rows["stuck@example.com"]["sent_at"]

    failed = senddock(env, "campaign", "recipients", str(cid), "--status", "failed")
    assert sorted(line.split()[0] for line in failed.stdout.splitlines()) == [
        "bounce-bob@example.com",
        "stuck@example.com",
    ]
    assert "last reply: 451 4.3.0" in failed.stdout
    bounced = senddock(env, "campaign", "recipients", str(cid), "--status", "bounced")
    assert [line.split()[0] for line in bounced.stdout.splitlines()] == ["bounce-bob@example.com"]

    # The relay is fixed. Only the failed, non-suppressed recipient goes back to the queue; the
    # sent campaign is sending again, and claimable at once.
    relay_refuses_stuck["on"] = False
    catcher.clear()
    retry = senddock(env, "campaign", "retry-failed", str(cid))
    assert retry.returncode == 0, retry.stderr
    assert "1 failed recipients queued again" in retry.stdout
    st = status(conn, cid)
    assert (st.status, st.counts.pending, st.counts.sent, st.counts.failed, st.counts.total) == (
        "sending",
        1,
        1,
        1,
        3,
    )
    j = jobs(conn, bid)["stuck@example.com"]
    assert (j["status"], j["attempts"], j["failure"]) == ("pending", 0, None)
    assert j["message_id"] == by_job["stuck@example.com"]["message_id"]

    with ThreadWorker(db_url, catcher.url):
        assert catcher.wait_for(1, timeout=30)
        assert wait_until(lambda: status(conn, cid).status == "sent")
    assert [r.rcpt for r in catcher.received()] == ["stuck@example.com"]
    assert catcher.received()[0].message_id == by_job["stuck@example.com"]["message_id"]
    st = status(conn, cid)
    assert (st.counts.total, st.counts.sent, st.counts.failed, st.counts.bounced) == (3, 2, 1, 1)
    assert unfinished(conn, bid) == 0

    # Nothing left to retry: nothing changes, and the campaign stays sent.
    again = senddock(env, "campaign", "retry-failed", str(cid))
    assert "0 failed recipients" in again.stdout
    assert status(conn, cid).status == "sent"


def test_retry_failed_refuses_a_campaign_never_sent(db_url: str, conn: Conn) -> None:
    from support import seed_list

    seed_list(conn, "news", ["ada@example.com"])
    cid = new_campaign(conn, "news")
    env = worker_env(db_url, "smtp://127.0.0.1:1?tls=none")
    for args in (("retry-failed", str(cid)), ("recipients", str(cid)), ("retry-failed", "999")):
        proc = senddock(env, "campaign", *args)
        assert proc.returncode != 0
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def _waiting(conn: Conn, pid: int) -> bool:
    row = conn.execute(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
    ).fetchone()
    return row is not None and row["wait_event_type"] == "Lock"


def test_retry_failed_wins_over_a_finish_that_read_the_queue_before_it_committed(
    db_url: str, conn: Conn
) -> None:
    """A finish statement whose snapshot predates the re-queue sees no unfinished job; if it
    then marks the broadcast finished, the re-queued jobs would never be claimed. Force that
    interleaving with row locks and check the campaign ends up sending, its jobs claimable."""
    cid, bid = send_campaign(conn, "news", ["ada@example.com", "bob@example.com"])
    conn.execute(
        "UPDATE broadcast_jobs SET status = 'failed', failure = 'exhausted', attempts = 6"
        " WHERE broadcast_id = %s",
        (bid,),
    )  # every job final, the broadcast still `running`: what a finish would close next
    holder = db(db_url)
    finisher = db(db_url)
    retrier = db(db_url)
    result: dict[str, object] = {}
    try:
        with holder.transaction():
            # Hold one job so the re-queue stops inside its transaction, broadcast row locked.
            holder.execute(
                "SELECT id FROM broadcast_jobs WHERE broadcast_id = %s ORDER BY id LIMIT 1"
                " FOR UPDATE",
                (bid,),
            )
            t = threading.Thread(target=lambda: result.__setitem__("n", retry_failed(retrier, cid)))
            t.start()
            retrier_pid = retrier.info.backend_pid
            assert wait_until(lambda: _waiting(conn, retrier_pid), timeout=10)
            # A finish starts now: its snapshot has no unfinished job; it waits for the row.
            f = threading.Thread(target=lambda: finisher.execute(QUERIES["finish"]))
            f.start()
            assert wait_until(lambda: _waiting(conn, finisher.info.backend_pid), timeout=10)
        t.join(10)
        f.join(10)
        assert not t.is_alive() and not f.is_alive()
    finally:
        for c in (holder, finisher, retrier):
            c.close()
    assert result["n"] == 2
    st = status(conn, cid)
    assert (st.status, st.counts.pending, st.counts.failed) == ("sending", 2, 0)
    b = conn.execute("SELECT status FROM broadcasts WHERE id = %s", (bid,)).fetchone()
    assert b == {"status": "running"}
