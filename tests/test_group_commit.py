"""Group commit and the held-back dot (invariant 3): outcomes share commits, never the window."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from senddock import queue
from senddock.campaigns import status
from senddock.delivery.link import Link
from senddock.delivery.outcome import Reply, Transition
from senddock.delivery.recorder import Recorder
from senddock.queue import Job, Outcome
from senddock.smtp.session import AHEAD_WINDOW
from senddock.testing import Catcher
from senddock.testing.catcher import message_id_of
from support import Conn, ThreadWorker, send_campaign, unfinished, wait_until

SENT = Transition("sent")
BOUNCED = Transition("failed", failure="bounced", suppress=True)
OK = Reply("data", 250, "2.0.0 queued")
NO_SUCH_USER = Reply("rcpt", 550, "5.1.1 no such user")


@pytest.mark.parametrize("dot_ms", [0, 5], ids=["relay-quick", "relay-5ms"])
def test_the_final_dot_waits_until_the_previous_message_is_recorded(
    conn: Conn, db_url: str, catcher: Catcher, dot_ms: int
) -> None:
    """When a session's next message is accepted, its previous one is already `sent`: with
    the relay quick to answer, and 5 ms slow, where each next envelope goes with the final dot
    (smtp/session.py) and only the dot still waits for the commit. (The catcher in the
    worker's process may answer slowly enough for envelopes to go ahead in both.)"""
    emails = [f"reader{i}@example.com" for i in range(400)]
    _, bid = send_campaign(conn, "news", emails)
    previous: dict[int, str] = {}
    checked: list[str] = []
    unrecorded: list[str] = []
    lock = threading.Lock()
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as look:

        def on_dot(session: int, data: bytes) -> None:
            mid = message_id_of(data)
            assert mid is not None
            with lock:
                before = previous.get(session)
                previous[session] = mid
                if before is None:
                    return
                row = look.execute(
                    "SELECT status FROM broadcast_jobs WHERE message_id = %s", (before,)
                ).fetchone()
                checked.append(before)
                if row is None or row["status"] == "sending":
                    unrecorded.append(before)

        catcher.on_dot = on_dot
        catcher.dot_delay = dot_ms / 1000
        with ThreadWorker(db_url, catcher.url, concurrency=5):
            assert wait_until(lambda: unfinished(conn, bid) == 0, 60)
        catcher.on_dot = None
    assert unrecorded == [], f"{len(unrecorded)} accepted before the previous was recorded"
    assert len(checked) >= len(emails) - 5 * 2  # every message but each session's first
    assert catcher.delivered_once(emails)
    if dot_ms:
        # Each session's first AHEAD_WINDOW dots measure the distance; then every dot but a
        # claimed batch's last carries the next envelope.
        assert catcher.dots_with_more >= len(emails) - 5 * AHEAD_WINDOW - 5 * 10


def test_a_batchs_last_final_dot_carries_the_envelope_of_the_next_batchs_first(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    """A sender claims its next batch before the last message of the one it is sending, so
    to a far relay that message's dot carries the next envelope too, as within a batch:
    every dot but a session's first AHEAD_WINDOW (they measure the distance) and its last."""
    emails = [f"reader{i}@example.com" for i in range(2 * AHEAD_WINDOW + 60)]
    _, bid = send_campaign(conn, "news", emails)
    catcher.dot_delay = 0.005
    with ThreadWorker(db_url, catcher.url, concurrency=2, claim_batch=4):
        assert wait_until(lambda: unfinished(conn, bid) == 0, 60)
    assert catcher.delivered_once(emails)
    # Without the claim ahead, each batch's last dot (one in four) would go alone: about 45.
    assert catcher.dots_with_more >= len(emails) - 2 * AHEAD_WINDOW - 2 * 3, catcher.dots_with_more


async def _claimed(db_url: str, owner: int, n: int) -> list[Job]:
    async with await psycopg.AsyncConnection.connect(
        db_url, autocommit=True, row_factory=dict_row
    ) as c:
        return await queue.claim(c, owner, n)


async def _recorder(db_url: str, owner: int) -> tuple[Recorder, asyncio.Task[None]]:
    """A recorder with one connection, running; cancel the task to stop it."""
    recorder = Recorder(Link(db_url, lambda: False), lambda: owner)
    return recorder, asyncio.create_task(recorder.run())


async def test_outcomes_handed_over_together_are_written_in_one_commit(
    conn: Conn, db_url: str
) -> None:
    emails = [f"r{i}@example.com" for i in range(10)]
    _, bid = send_campaign(conn, "news", emails)
    assert wait_until(lambda: len(_rows(conn, bid)) == 10, 10)
    owner = 7  # an owner id no live worker has: nobody rescues these claims
    jobs = await _claimed(db_url, owner, 10)
    assert len(jobs) == 10
    recorder, task = await _recorder(db_url, owner)
    bounce = jobs[0]
    waiting = [
        recorder.submit(Outcome(j, BOUNCED, NO_SUCH_USER) if j is bounce else Outcome(j, SENT, OK))
        for j in jobs
    ]
    assert await asyncio.gather(*waiting) == [True] * 10
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert recorder.groups == 1 and recorder.written == 10
    rows = _rows(conn, bid)
    assert sorted(r["status"] for r in rows.values()) == ["failed"] + ["sent"] * 9
    assert rows[bounce.email]["failure"] == "bounced"
    suppressed = conn.execute(
        "SELECT reason FROM suppressions WHERE lower(email) = lower(%s)", (bounce.email,)
    ).fetchone()
    assert suppressed is not None and suppressed["reason"] == "bounce"


async def test_a_lost_claim_in_a_group_is_not_written_and_the_rest_are(
    conn: Conn, db_url: str
) -> None:
    emails = [f"r{i}@example.com" for i in range(3)]
    _, bid = send_campaign(conn, "news", emails)
    assert wait_until(lambda: len(_rows(conn, bid)) == 3, 10)
    jobs = await _claimed(db_url, 7, 3)
    lost = jobs[1]
    # A peer judged us dead and rescued this one job while its message was in flight.
    conn.execute(
        "UPDATE broadcast_jobs SET status = 'retry', owner = NULL WHERE id = %s", (lost.id,)
    )
    recorder, task = await _recorder(db_url, 7)
    results = await asyncio.gather(*(recorder.submit(Outcome(j, SENT, OK)) for j in jobs))
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert results == [True, False, True]
    rows = _rows(conn, bid)
    assert rows[lost.email]["status"] == "retry" and rows[lost.email]["owner"] is None
    assert [rows[j.email]["status"] for j in (jobs[0], jobs[2])] == ["sent", "sent"]
    # What a recorder reads back after a commit whose reply was lost: exactly what landed.
    async with await psycopg.AsyncConnection.connect(
        db_url, autocommit=True, row_factory=dict_row
    ) as c:
        assert await queue.landed_many(c, 7, jobs) == {jobs[0].id, jobs[2].id}


async def test_a_group_waits_for_a_need_a_full_group_or_its_linger(conn: Conn, db_url: str) -> None:
    """Outcomes gather until a sender needs one, every sender has one in, or time is up."""
    emails = [f"r{i}@example.com" for i in range(6)]
    _, bid = send_campaign(conn, "news", emails)
    assert wait_until(lambda: len(_rows(conn, bid)) == 6, 10)
    jobs = await _claimed(db_url, 7, 6)
    recorder = Recorder(Link(db_url, lambda: False), lambda: 7, full=3, linger=30.0)
    task = asyncio.create_task(recorder.run())

    def statuses() -> list[str]:
        rows = _rows(conn, bid)
        return [rows[j.email]["status"] for j in jobs]

    try:
        first = [recorder.submit(Outcome(j, SENT, OK)) for j in jobs[:2]]
        await asyncio.sleep(0.5)
        assert recorder.groups == 0 and statuses()[:2] == ["sending", "sending"]
        recorder.need()  # a sender reached its next final dot
        assert await asyncio.wait_for(asyncio.gather(*first), 5) == [True, True]
        assert recorder.groups == 1 and statuses()[:2] == ["sent", "sent"]
        full = [recorder.submit(Outcome(j, SENT, OK)) for j in jobs[2:5]]
        assert await asyncio.wait_for(asyncio.gather(*full), 10) == [True] * 3
        assert recorder.groups == 2 and recorder.written == 5
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    # Nobody needs it and the group is not full: it is written once its linger is over.
    recorder = Recorder(Link(db_url, lambda: False), lambda: 7, full=3, linger=0.2)
    task = asyncio.create_task(recorder.run())
    try:
        assert await asyncio.wait_for(recorder.submit(Outcome(jobs[5], SENT, OK)), 10)
        assert statuses() == ["sent"] * 6
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_marks_ride_with_a_group_and_never_fill_it(conn: Conn, db_url: str) -> None:
    """A group is full when every sender's outcome is in; the marks of the dots that follow
    (issue 23) ride with it and do not count, or a group would commit half full."""
    emails = [f"r{i}@example.com" for i in range(6)]
    _, bid = send_campaign(conn, "news", emails)
    assert wait_until(lambda: len(_rows(conn, bid)) == 6, 10)
    jobs = await _claimed(db_url, 7, 6)
    recorder = Recorder(Link(db_url, lambda: False), lambda: 7, full=3, linger=30.0)
    task = asyncio.create_task(recorder.run())
    try:
        waiting = []
        for i, (done, next_one) in enumerate(zip(jobs[:3], jobs[3:], strict=True)):
            if i == 2:
                await asyncio.sleep(0.5)  # two outcomes and two marks in: not full, waits
                assert recorder.groups == 0
            waiting.append(recorder.submit(Outcome(done, SENT, OK)))
            waiting.append(recorder.mark(queue.Dot(next_one, "relay")))
        assert await asyncio.wait_for(asyncio.gather(*waiting), 10) == [True] * 6
        assert recorder.groups == 1 and recorder.written == 3
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    rows = _rows(conn, bid)
    assert [rows[j.email]["status"] for j in jobs[:3]] == ["sent"] * 3
    assert all(rows[j.email]["dot_at"] is not None for j in jobs[3:])


def _rows(conn: Conn, bid: int) -> dict[str, dict[str, Any]]:
    rows = conn.execute("SELECT * FROM broadcast_jobs WHERE broadcast_id = %s", (bid,)).fetchall()
    return {str(r["email"]): r for r in rows}


DOOM = """
CREATE FUNCTION senddock_test_doom() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'this outcome cannot be written';
END $$;
CREATE TRIGGER senddock_test_doom BEFORE UPDATE ON broadcast_jobs FOR EACH ROW
    WHEN (NEW.status = 'sent' AND NEW.email = 'doomed@example.com')
    EXECUTE FUNCTION senddock_test_doom();
"""
UNDOOM = "DROP TRIGGER senddock_test_doom ON broadcast_jobs; DROP FUNCTION senddock_test_doom()"


def test_an_outcome_that_cannot_be_written_stops_the_worker_and_nothing_is_lost(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    """A group the database refuses for a reason other than a lost connection (which the
    recorder outlasts): no sender sends another final dot, the worker stops by itself with a
    non-zero exit instead of hanging with its heartbeat alive, and a new worker delivers the
    rest. A message whose outcome was lost is unconfirmed, not sent twice (issue 23): at most
    one per session, and the catcher had each of them."""
    emails = [f"r{i}@example.com" for i in range(30)]
    emails[10] = "doomed@example.com"
    cid, bid = send_campaign(conn, "news", emails)
    conn.execute(DOOM)
    with ThreadWorker(db_url, catcher.url, concurrency=2) as first:
        stopped = wait_until(lambda: first.exit_code is not None, timeout=30)
        assert stopped, "the worker went on (or hung) after an outcome could not be written"
    assert first.exit_code == 1
    assert catcher.count_by_rcpt()["doomed@example.com"] == 1
    assert catcher.duplicates() == {}
    doomed = conn.execute(
        "SELECT status, attempts FROM broadcast_jobs WHERE email = 'doomed@example.com'"
    ).fetchone()
    assert doomed == {"status": "sending", "attempts": 1}  # started: left to the rescue
    conn.execute(UNDOOM)
    with ThreadWorker(db_url, catcher.url, concurrency=2):
        assert wait_until(lambda: unfinished(conn, bid) == 0, timeout=30)
    assert set(catcher.count_by_rcpt()) == set(emails)  # nobody dropped
    assert catcher.duplicates() == {}  # nobody twice: the lost outcomes are unconfirmed
    rows = conn.execute(
        "SELECT email, status FROM broadcast_jobs WHERE broadcast_id = %s AND status <> 'sent'",
        (bid,),
    ).fetchall()
    held = {r["email"] for r in rows}
    assert "doomed@example.com" in held and len(held) <= 2  # at most one a session
    assert {r["status"] for r in rows} == {"unconfirmed"}
    assert status(conn, cid)["status"] == "sending"  # not `sent` while any is unconfirmed
    with conn.transaction():
        assert queue.confirm(conn, bid) == len(held)
    queue.finish_sync(conn)
    assert status(conn, cid)["status"] == "sent"


async def _carry_then_rescue(db_url: str, owner: int) -> dict[str, list[Job]]:
    """Claim six jobs as `owner`, record outcomes that carry the next dots' marks (or not), give
    one job back and claim it again, then rescue the owner as dead."""
    async with await psycopg.AsyncConnection.connect(
        db_url, autocommit=True, row_factory=dict_row
    ) as c:
        a, b, r, d, s, e = await queue.claim(c, owner, 6)
        # A sent outcome carries the next dot's mark; a retry does not, its next dot has its own.
        retry = Transition("retry", delay=3600)
        group = await queue.record_group(
            c,
            owner,
            [Outcome(a, SENT, OK), Outcome(r, retry, Reply("data", 451, "4.3.0 later"))],
            [queue.Dot(b, "relay-b", a.id), queue.Dot(d, "relay-d", r.id)],
        )
        assert group.outcomes == {a.id, r.id} and group.dots == {b.id, d.id}
        # A mark from an earlier claim: `e` is marked on sent `s`, then given back (its attempt
        # too) and claimed again by the same owner, never started: it must come back unmarked.
        assert (
            await queue.record_group(c, owner, [Outcome(s, SENT, OK)], [queue.Dot(e, "x", s.id)])
        ).dots == {e.id}
        await queue.release(c, owner, [e])
        again = await queue.claim(c, owner, 1)
        assert [j.id for j in again] == [e.id] and again[0].attempts == e.attempts
        assert await queue.rescue(c, [owner]) == 3
    return {"carried": [a, b], "own": [r, d], "stale": [s, e]}


def test_a_sent_outcome_carries_the_next_mark_and_a_rescue_finds_it(
    conn: Conn, db_url: str
) -> None:
    """Issue 23, 0025: the mark of a session's next dot rides on its previous outcome's row when
    that outcome is `sent` (a row never written again), so the next job's row is not written
    for it; after a retry it is written on its own row. A rescue finds both kinds and makes
    those jobs unconfirmed, with the mark's relay; a mark from an earlier claim does not count."""
    emails = [f"c{i}@example.com" for i in range(6)]
    _, bid = send_campaign(conn, "news", emails)
    assert wait_until(lambda: len(_rows(conn, bid)) == 6, 10)
    got = asyncio.run(_carry_then_rescue(db_url, 9))
    rows = {int(r["id"]): r for r in _rows(conn, bid).values()}
    a, b = got["carried"]
    assert rows[a.id]["next_dot"] == b.id and rows[a.id]["next_relay"] == "relay-b"
    assert rows[b.id]["status"] == "unconfirmed" and rows[b.id]["dot_relay"] == "relay-b"
    assert rows[b.id]["dot_at"] == rows[a.id]["updated_at"]  # when its mark was committed
    assert rows[b.id]["attempts"] == 1  # spent: it may have been accepted
    r, d = got["own"]
    assert rows[r.id]["status"] == "retry" and rows[r.id]["next_dot"] is None
    assert rows[d.id]["status"] == "unconfirmed" and rows[d.id]["dot_relay"] == "relay-d"
    s, e = got["stale"]
    assert rows[s.id]["next_dot"] == e.id
    # Held but never started since its new claim: back as retry, its attempt given back.
    assert rows[e.id]["status"] == "retry" and rows[e.id]["attempts"] == 0
