"""Each row of the outcome rules, end to end: a real worker, a real SMTP server, real rows.

Every test asserts both sides: what the SMTP server received, and what the job rows hold.
Retries wait an hour here (HOLD) and the test makes them due by moving `run_at`, so each
intermediate state can be read without racing the worker.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from senddock.campaigns import broadcast, resume, status
from senddock.testing import Catcher, Fault, convention_fault
from support import (
    Conn,
    ThreadWorker,
    jobs,
    new_campaign,
    send_campaign,
    unfinished,
    wait_until,
)

HOLD = "3600,3600,3600,3600,3600"  # a retry waits until the test makes it due
Row = dict[str, Any]


# -- helpers -------------------------------------------------------------------------------


def job(conn: Conn, bid: int, email: str) -> Row:
    row = conn.execute(
        "SELECT * FROM broadcast_jobs WHERE broadcast_id = %s AND lower(email) = lower(%s)",
        (bid, email),
    ).fetchone()
    assert row is not None, f"no job for {email}"
    return row


def wait_job(
    conn: Conn, bid: int, email: str, pred: Callable[[Row], bool], timeout: float = 30.0
) -> Row:
    """Poll the job of `email` until `pred` holds; that row."""
    seen: list[Row] = []

    def check() -> bool:
        row = job(conn, bid, email)
        seen[:] = [row]
        return pred(row)

    assert wait_until(check, timeout), f"job of {email} stuck at {seen}"
    return seen[0]


def retrying(attempts: int) -> Callable[[Row], bool]:
    return lambda r: r["status"] == "retry" and r["attempts"] == attempts


def make_due(conn: Conn, bid: int) -> None:
    """Let every waiting retry of the broadcast run now (time passes, without sleeping)."""
    conn.execute(
        "UPDATE broadcast_jobs SET run_at = now() WHERE broadcast_id = %s AND status = 'retry'",
        (bid,),
    )


def drain(conn: Conn, bid: int, timeout: float = 60.0) -> None:
    assert wait_until(lambda: unfinished(conn, bid) == 0, timeout), jobs(conn, bid)


def assert_sent(row: Row, attempts: int) -> None:
    """The row of a job the server accepted: its 250 reply to DATA, and nothing else."""
    assert row["status"] == "sent", row
    assert row["failure"] is None
    assert row["attempts"] == attempts
    assert row["last_code"] == 250
    assert row["last_enhanced"] == "2.0.0"
    assert row["last_stage"] == "data"
    assert row["last_reply"] == "2.0.0 OK"
    assert row["sent_at"] is not None
    assert row["owner"] is not None


def assert_waiting(row: Row, attempts: int, stage: str, code: int | None, reply: str) -> None:
    """The row of a job whose attempt failed transiently: a retry an hour (HOLD) away."""
    assert row["status"] == "retry", row
    assert row["failure"] is None
    assert row["attempts"] == attempts
    assert row["last_stage"] == stage
    assert row["last_code"] == code
    assert reply in (row["last_reply"] or "")
    assert row["sent_at"] is None
    wait = row["run_at"] - row["updated_at"]
    assert abs(wait - timedelta(seconds=3600)) < timedelta(seconds=1)


def received_ids(catcher: Catcher, email: str) -> list[str | None]:
    return [r.message_id for r in catcher.received() if r.rcpt.lower() == email.lower()]


def suppressed(conn: Conn) -> list[Row]:
    return conn.execute("SELECT * FROM suppressions ORDER BY email").fetchall()


def subscriber_statuses(conn: Conn) -> dict[str, str]:
    rows = conn.execute("SELECT email, status FROM subscribers").fetchall()
    return {str(r["email"]).lower(): str(r["status"]) for r in rows}


# -- 250 after DATA: sent ------------------------------------------------------------------


def test_a_250_after_data_marks_the_job_sent_with_its_message_id(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    emails = ["ann@example.com", "bob@example.com", "cy@example.com"]
    cid, bid = send_campaign(conn, "news", emails)
    with ThreadWorker(db_url, catcher.url, concurrency=2, retry_schedule=HOLD):
        drain(conn, bid)
    assert catcher.delivered_once(emails)
    rows = jobs(conn, bid)
    for address in emails:
        assert_sent(rows[address], attempts=1)
        # The Message-ID the server received is the job's own (invariant 9).
        assert received_ids(catcher, address) == [rows[address]["message_id"]]
    assert len({r["message_id"] for r in rows.values()}) == len(emails)
    st = status(conn, cid)
    assert (st.status, st.counts.sent, st.counts.failed, st.counts.total) == ("sent", 3, 0, 3)


# -- 4xx / network errors: retry with backoff, delivered once ------------------------------


def test_a_4xx_at_rcpt_is_retried_and_delivered_once_with_the_same_message_id(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    flaky = "flaky-ann@example.com"  # 451 at RCPT on the first two attempts
    cid, bid = send_campaign(conn, "news", [flaky, "bob@example.com"])
    with ThreadWorker(db_url, catcher.url, concurrency=1, retry_schedule=HOLD):
        first = wait_job(conn, bid, flaky, retrying(1))
        assert_waiting(first, 1, "rcpt", 451, "4.3.0 try again later")
        assert first["last_enhanced"] == "4.3.0"
        assert received_ids(catcher, flaky) == []
        make_due(conn, bid)
        second = wait_job(conn, bid, flaky, retrying(2))
        assert_waiting(second, 2, "rcpt", 451, "4.3.0 try again later")
        make_due(conn, bid)
        drain(conn, bid)
    done = job(conn, bid, flaky)
    assert_sent(done, attempts=3)
    assert catcher.attempts_by_rcpt[flaky] == 3
    assert catcher.delivered_once([flaky, "bob@example.com"])
    # Same Message-ID in the retry state, in the sent state, and at the server.
    assert first["message_id"] == second["message_id"] == done["message_id"]
    assert received_ids(catcher, flaky) == [done["message_id"]]
    assert status(conn, cid).status == "sent"


def test_a_4xx_after_data_is_retried_and_delivered_once(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    flaky = "flakydata-ann@example.com"  # 451 after DATA on the first two attempts
    _, bid = send_campaign(conn, "news", [flaky])
    with ThreadWorker(db_url, catcher.url, concurrency=1, retry_schedule=HOLD):
        first = wait_job(conn, bid, flaky, retrying(1))
        assert_waiting(first, 1, "data", 451, "4.3.0 try again later")
        make_due(conn, bid)
        wait_job(conn, bid, flaky, retrying(2))
        assert received_ids(catcher, flaky) == []
        make_due(conn, bid)
        drain(conn, bid)
    done = job(conn, bid, flaky)
    assert_sent(done, attempts=3)
    assert done["message_id"] == first["message_id"]
    assert catcher.delivered_once([flaky])
    assert received_ids(catcher, flaky) == [done["message_id"]]


@pytest.mark.parametrize("batch", [50, 1], ids=["batch-50", "batch-1"])
def test_a_refused_connection_is_retried_never_failed_nor_suppressed(
    conn: Conn, db_url: str, catcher: Catcher, batch: int
) -> None:
    """The job that met the refusal waits to retry; the rest of its batch goes back, and so
    does (batches of one) the next batch, claimed before that job was tried (worker.py)."""
    emails = ["ann@example.com", "bob@example.com", "cy@example.com"]
    cid, bid = send_campaign(conn, "news", emails)
    catcher.set_down(True)
    with ThreadWorker(db_url, catcher.url, concurrency=1, retry_schedule=HOLD, claim_batch=batch):

        def refused() -> list[Row]:
            return [r for r in jobs(conn, bid).values() if r["last_stage"] == "connect"]

        assert wait_until(lambda: len(refused()) >= 1, 30)
        rows = jobs(conn, bid)
        for row in refused():
            assert_waiting(row, row["attempts"], "connect", None, "refused")
        assert all(r["status"] in ("pending", "retry", "sending") for r in rows.values())
        assert suppressed(conn) == []
        assert set(subscriber_statuses(conn).values()) == {"active"}
        assert catcher.received_count() == 0
        st = status(conn, cid)
        assert (st.status, st.counts.failed) == ("sending", 0)

        catcher.set_down(False)
        make_due(conn, bid)
        drain(conn, bid)
    assert catcher.delivered_once(emails)
    for address, row in jobs(conn, bid).items():
        assert_sent(row, attempts=row["attempts"])
        assert received_ids(catcher, address) == [row["message_id"]]
    assert suppressed(conn) == []
    assert status(conn, cid).status == "sent"


def test_a_disconnect_mid_data_is_retried_and_delivered_once(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    # With SENDDOCK_UNCONFIRMED=resend (issue 23; the default holds it unconfirmed:
    # tests/test_unconfirmed.py).
    dropped = "drop-ann@example.com"  # the server hangs up after the data, before replying
    _, bid = send_campaign(conn, "news", [dropped, "bob@example.com"])
    with ThreadWorker(
        db_url, catcher.url, concurrency=1, retry_schedule=HOLD, unconfirmed="resend"
    ):
        first = wait_job(conn, bid, dropped, retrying(1))
        assert_waiting(first, 1, "dot", None, "")
        assert first["last_enhanced"] is None
        assert received_ids(catcher, dropped) == []
        make_due(conn, bid)
        drain(conn, bid)
    done = job(conn, bid, dropped)
    assert_sent(done, attempts=2)
    assert done["message_id"] == first["message_id"]
    assert catcher.delivered_once([dropped, "bob@example.com"])
    assert suppressed(conn) == []


def test_a_lost_reply_to_data_is_retried_with_the_same_message_id(conn: Conn, db_url: str) -> None:
    # The server keeps the message, then its 250 is lost with the connection: the one
    # duplicate nothing can prevent with SENDDOCK_UNCONFIRMED=resend (the default holds it:
    # tests/test_unconfirmed.py). It carries the same Message-ID, so it is recognisable.
    def lose_reply(address: str) -> Fault | None:
        if address.startswith("lost-"):
            return Fault.stall(seconds=0, attempts=1, then="drop", record_first=True)
        return convention_fault(address)

    lost = "lost-ann@example.com"
    with Catcher(fault_for=lose_reply) as catcher:
        _, bid = send_campaign(conn, "news", [lost])
        with ThreadWorker(
            db_url, catcher.url, concurrency=1, retry_schedule=HOLD, unconfirmed="resend"
        ):
            first = wait_job(conn, bid, lost, retrying(1))
            assert_waiting(first, 1, "dot", None, "")
            make_due(conn, bid)
            drain(conn, bid)
        done = job(conn, bid, lost)
        assert_sent(done, attempts=2)
        assert received_ids(catcher, lost) == [done["message_id"], done["message_id"]]
        assert done["message_id"] == first["message_id"]


def test_a_stall_longer_than_the_smtp_timeout_is_retried_and_does_not_wedge_the_worker(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    stalled = "stall-ann@example.com"  # the server sits on DATA for 5 s on the first attempt
    others = [f"user{i}@example.com" for i in range(5)]
    _, bid = send_campaign(conn, "news", [stalled, *others])
    with ThreadWorker(
        db_url,
        catcher.url,
        concurrency=1,
        retry_schedule=HOLD,
        smtp_timeout=1,
        unconfirmed="resend",  # a timeout after the dot: issue 23's default holds it
    ) as worker:
        first = wait_job(conn, bid, stalled, retrying(1))
        assert_waiting(first, 1, "dot", None, "timeout")
        # The one sender went on to everyone else while the stalled job waits its retry.
        assert wait_until(lambda: all(jobs(conn, bid)[a]["status"] == "sent" for a in others))
        make_due(conn, bid)
        drain(conn, bid)
        assert worker.error is None
    assert_sent(job(conn, bid, stalled), attempts=2)
    assert catcher.delivered_once([stalled, *others])
    assert received_ids(catcher, stalled) == [first["message_id"]]


# -- 5xx for the recipient at RCPT: bounce and suppress ------------------------------------


def test_a_5_1_1_at_rcpt_bounces_suppresses_and_is_never_retried(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    bounced = "bounce-ann@example.com"  # 550 5.1.1 at RCPT
    good = ["bob@example.com", "cy@example.com"]
    cid, bid = send_campaign(conn, "news", [bounced, *good])
    with ThreadWorker(db_url, catcher.url, concurrency=1, retry_schedule=HOLD):
        drain(conn, bid)
    row = job(conn, bid, bounced)
    assert (row["status"], row["failure"], row["attempts"]) == ("failed", "bounced", 1)
    assert (row["last_code"], row["last_enhanced"], row["last_stage"]) == (550, "5.1.1", "rcpt")
    assert row["last_reply"] == f"5.1.1 <{bounced}>: no such user"
    assert row["sent_at"] is None
    [sup] = suppressed(conn)
    assert (sup["email"], sup["reason"], sup["source_broadcast_id"]) == (bounced, "bounce", bid)
    assert "5.1.1" in sup["detail"]
    assert subscriber_statuses(conn) == {bounced: "bounced", **dict.fromkeys(good, "active")}
    assert catcher.attempts_by_rcpt[bounced] == 1
    assert catcher.delivered_once(good)
    st = status(conn, cid)
    assert (st.status, st.counts.sent, st.counts.bounced, st.counts.failed) == ("sent", 2, 1, 1)


def test_a_rcpt_5xx_without_enhanced_code_is_a_bounce(conn: Conn, db_url: str) -> None:
    def plain(address: str) -> Fault | None:
        if address.startswith("gone-"):
            return Fault.reject_rcpt("550 no such user here")
        return None

    gone = "gone-ann@example.com"
    with Catcher(fault_for=plain) as catcher:
        _, bid = send_campaign(conn, "news", [gone, "bob@example.com"])
        with ThreadWorker(db_url, catcher.url, concurrency=1, retry_schedule=HOLD):
            drain(conn, bid)
        row = job(conn, bid, gone)
        assert (row["status"], row["failure"], row["last_code"]) == ("failed", "bounced", 550)
        assert (row["last_enhanced"], row["last_stage"]) == (None, "rcpt")
        assert [s["email"] for s in suppressed(conn)] == [gone]
        assert catcher.attempts_by_rcpt[gone] == 1
        assert catcher.delivered_once(["bob@example.com"])


def test_a_bounced_address_is_skipped_by_the_next_campaign_to_the_same_list(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    bounced = "bounce-ann@example.com"
    good = ["bob@example.com", "cy@example.com"]
    _, first = send_campaign(conn, "news", [bounced, *good], name="first")
    with ThreadWorker(db_url, catcher.url, concurrency=1, retry_schedule=HOLD):
        drain(conn, first)
        catcher.clear()
        cid = new_campaign(conn, "news", name="second")
        second, total, created = broadcast(conn, cid)
        assert (created, total) == (True, len(good))
        assert sorted(jobs(conn, second)) == sorted(good)  # no job for the bounced address
        drain(conn, second)
    assert catcher.delivered_once(good)
    assert catcher.attempts_by_rcpt[bounced] == 1  # the first campaign's one attempt only
    assert status(conn, cid).status == "sent"


# -- 5xx about us: nobody suppressed, attempt given back, broadcast paused -----------------

# where -> (stage, code, enhanced, reply text) the relay answers with
SENDER_FAULTS = {
    "mail-from": ("mail", 553, "5.7.1", "5.7.1 sender not allowed"),
    "rcpt-5.7.1": ("rcpt", 550, "5.7.1", "5.7.1 relaying denied"),
    "data-5.7.1": ("data", 554, "5.7.1", "5.7.1 message rejected as spam"),
}


def break_relay(catcher: Catcher, where: str) -> None:
    if where == "mail-from":
        catcher.reject_mail_from = "553 5.7.1 sender not allowed"
    elif where == "rcpt-5.7.1":
        catcher.fault_for = lambda _: Fault.reject_rcpt("550 5.7.1 relaying denied")
    else:
        catcher.fault_for = lambda _: Fault.reject_data("554 5.7.1 message rejected as spam")


def fix_relay(catcher: Catcher) -> None:
    catcher.reject_mail_from = None
    catcher.fault_for = convention_fault


@pytest.mark.parametrize("where", list(SENDER_FAULTS))
def test_a_relay_rejecting_us_pauses_the_broadcast_and_suppresses_nobody(
    conn: Conn, db_url: str, catcher: Catcher, where: str
) -> None:
    stage, code, enhanced, reply = SENDER_FAULTS[where]
    emails = [f"user{i}@example.com" for i in range(6)]
    cid, bid = send_campaign(conn, "news", emails)
    break_relay(catcher, where)
    with ThreadWorker(
        db_url, catcher.url, concurrency=1, retry_schedule=HOLD, sender_fault_limit=3
    ):
        assert wait_until(lambda: status(conn, cid).status == "paused", 30), status(conn, cid)
        assert wait_until(lambda: status(conn, cid).counts.sending == 0, 30)
        st = status(conn, cid)
        assert f"{code} {reply}" in (st.pause_reason or "")
        b = conn.execute("SELECT status FROM broadcasts WHERE id = %s", (bid,)).fetchone()
        assert b is not None and b["status"] == "paused"

        rows = jobs(conn, bid)
        tried = [r for r in rows.values() if r["sender_faults"] > 0]
        assert len(tried) == 3  # three replies about us in a row, one sender
        for r in tried:
            # The attempt is given back: a relay's fault spends no subscriber's budget.
            assert (r["status"], r["failure"], r["attempts"]) == ("retry", None, 0)
            assert (r["last_stage"], r["last_code"], r["last_enhanced"]) == (stage, code, enhanced)
            assert r["last_reply"] == reply
            assert r["sent_at"] is None
        for r in rows.values():
            if r["sender_faults"] == 0:
                assert (r["status"], r["attempts"]) == ("pending", 0)
        assert st.counts.failed == 0
        assert suppressed(conn) == []
        assert set(subscriber_statuses(conn).values()) == {"active"}
        assert catcher.received_count() == 0

        # A person fixes the relay and resumes: everyone gets exactly one message.
        fix_relay(catcher)
        resume(conn, cid)
        drain(conn, bid)
    assert catcher.delivered_once(emails)
    for address, row in jobs(conn, bid).items():
        assert_sent(row, attempts=1)
        assert received_ids(catcher, address) == [row["message_id"]]
    st = status(conn, cid)
    assert (st.status, st.counts.sent, st.pause_reason) == ("sent", len(emails), None)
    assert suppressed(conn) == []


def test_a_job_sent_back_by_sender_faults_too_often_fails_as_rejected_unsuppressed(
    conn: Conn, db_url: str
) -> None:
    def spam(address: str) -> Fault | None:
        return Fault.reject_data() if address.startswith("spam-") else None

    flagged = "spam-ann@example.com"
    good = ["bob@example.com", "cy@example.com"]
    with Catcher(fault_for=spam) as catcher:
        cid, bid = send_campaign(conn, "news", [flagged, *good])
        # Never pause, so the per-job limit (5) is what ends this job.
        with ThreadWorker(
            db_url, catcher.url, concurrency=1, sender_fault_limit=100, job_sender_fault_limit=5
        ):
            drain(conn, bid)
        row = job(conn, bid, flagged)
        assert (row["status"], row["failure"]) == ("failed", "rejected")
        assert (row["attempts"], row["sender_faults"]) == (0, 5)
        assert (row["last_stage"], row["last_code"], row["last_enhanced"]) == (
            "data",
            554,
            "5.7.1",
        )
        assert row["sent_at"] is None
        assert catcher.attempts_by_rcpt[flagged] == 5
        assert catcher.delivered_once(good)
        assert suppressed(conn) == []
        assert set(subscriber_statuses(conn).values()) == {"active"}
        st = status(conn, cid)
        assert (st.status, st.counts.sent, st.counts.rejected) == ("sent", 2, 1)


def test_another_5xx_at_rcpt_fails_as_rejected_and_suppresses_nobody(
    conn: Conn, db_url: str
) -> None:
    def full(address: str) -> Fault | None:
        return Fault.reject_rcpt("552 5.2.2 mailbox full") if address.startswith("full-") else None

    mailbox_full = "full-ann@example.com"
    with Catcher(fault_for=full) as catcher:
        cid, bid = send_campaign(conn, "news", [mailbox_full, "bob@example.com"])
        with ThreadWorker(db_url, catcher.url, concurrency=1, retry_schedule=HOLD):
            drain(conn, bid)
        row = job(conn, bid, mailbox_full)
        assert (row["status"], row["failure"], row["attempts"]) == ("failed", "rejected", 1)
        assert (row["last_stage"], row["last_code"], row["last_enhanced"]) == (
            "rcpt",
            552,
            "5.2.2",
        )
        assert catcher.attempts_by_rcpt[mailbox_full] == 1
        assert catcher.delivered_once(["bob@example.com"])
        assert suppressed(conn) == []
        assert set(subscriber_statuses(conn).values()) == {"active"}
        assert status(conn, cid).status == "sent"


# -- suppressed after enqueue: failed as suppressed, never sent ----------------------------


def test_an_address_suppressed_after_enqueue_is_never_sent(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    gone = "ann@example.com"
    good = ["bob@example.com", "cy@example.com"]
    cid, bid = send_campaign(conn, "news", [gone, *good])
    assert gone in jobs(conn, bid)
    conn.execute(
        "INSERT INTO suppressions (email, reason) VALUES (%s, 'manual')", ("ANN@Example.com",)
    )
    with ThreadWorker(db_url, catcher.url, concurrency=1, retry_schedule=HOLD):
        drain(conn, bid)
    row = job(conn, bid, gone)
    assert (row["status"], row["failure"], row["attempts"]) == ("failed", "suppressed", 0)
    assert (row["last_code"], row["last_stage"], row["sent_at"]) == (None, None, None)
    assert catcher.attempts_by_rcpt[gone] == 0
    assert catcher.delivered_once(good)
    st = status(conn, cid)
    assert (st.status, st.counts.sent, st.counts.suppressed) == ("sent", 2, 1)
