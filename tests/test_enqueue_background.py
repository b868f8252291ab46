"""Enqueue in the background (issue 6, target 2): `campaign send` returns at once, workers
enqueue the rest in chunks, and a crash mid-enqueue neither loses nor duplicates a job.

Each chunk is one transaction that inserts its jobs and advances the cursor together; the
campaign is not `sent` before the last chunk; cancel stops the enqueue. Checked with real
Postgres, real worker processes killed with SIGKILL, and what the SMTP server received.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from crash_support import Fleet, sessions_gone, worker_id
from senddock.audience.lists import ensure_list
from senddock.campaigns import broadcast, cancel, pause, resume, status
from senddock.campaigns.broadcast import CHUNK, FIRST_CHUNK, PARTS, enqueue_all, enqueue_chunk
from senddock.db import connect
from senddock.queue import QUERIES
from senddock.testing import Catcher
from support import Conn, ThreadWorker, new_campaign, seed_list, unfinished, wait_until, worker_env

# Test-only: every enqueue chunk takes at least this long (a statement trigger sleeps), so a
# process can be killed, or a campaign cancelled, while a chunk is in flight.
SLOW_CHUNKS = """
CREATE OR REPLACE FUNCTION test_slow_chunk() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep({seconds}); RETURN NULL; END $$;
CREATE TRIGGER test_slow_chunk AFTER INSERT ON broadcast_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION test_slow_chunk();
"""
FAST_CHUNKS = """
DROP TRIGGER IF EXISTS test_slow_chunk ON broadcast_jobs;
DROP FUNCTION IF EXISTS test_slow_chunk();
"""


@pytest.fixture
def slow_chunks(conn: Conn) -> Iterator[None]:
    conn.execute(FAST_CHUNKS)
    conn.execute(SLOW_CHUNKS.format(seconds=0.3))
    try:
        yield
    finally:
        conn.execute(FAST_CHUNKS)


def seed_many(conn: Conn, list_name: str, n: int) -> list[str]:
    """n confirmed subscribers on `list_name`, seeded in SQL; their addresses."""
    list_id = ensure_list(conn, list_name)
    with conn.transaction():
        conn.execute(
            "INSERT INTO subscribers (email, name) SELECT 'big' || g || '@example.com',"
            " 'Big ' || g FROM generate_series(1, %s) g",
            (n,),
        )
        conn.execute(
            "INSERT INTO list_memberships (list_id, subscriber_id)"
            " SELECT %s, id FROM subscribers WHERE email LIKE 'big%%@example.com'",
            (list_id,),
        )
    conn.execute("ANALYZE subscribers, list_memberships")
    return [f"big{g}@example.com" for g in range(1, n + 1)]


def jobs_by_address(conn: Conn, bid: int) -> dict[str, int]:
    rows = conn.execute(
        "SELECT lower(email) AS e, count(*) AS n FROM broadcast_jobs WHERE broadcast_id = %s"
        " GROUP BY 1",
        (bid,),
    ).fetchall()
    return {str(r["e"]): int(r["n"]) for r in rows}


def enqueuing(conn: Conn, bid: int) -> bool:
    row = conn.execute(
        "SELECT count(*) AS n FROM broadcast_enqueues WHERE broadcast_id = %s", (bid,)
    ).fetchone()
    return row is not None and int(row["n"]) == 1


def chunk_in_flight(conn: Conn, appname: str | None = None) -> bool:
    """Some session is inside an enqueue chunk's INSERT right now."""
    row = conn.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE state = 'active'"
        " AND query LIKE '%%INSERT INTO broadcast_jobs%%' AND pid <> pg_backend_pid()"
        " AND (%(app)s::text IS NULL OR application_name = %(app)s)",
        {"app": appname},
    ).fetchone()
    return row is not None and int(row["n"]) > 0


def test_send_returns_before_a_big_list_is_enqueued_and_a_worker_sends_everyone_once(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    emails = seed_many(conn, "big", 6000)
    cid = new_campaign(conn, "big")
    t0 = time.perf_counter()
    bid, so_far, created = broadcast(conn, cid)
    took = time.perf_counter() - t0
    # Only the first chunk exists when send returns; the rest is the workers' job.
    assert created and so_far == FIRST_CHUNK
    assert len(jobs_by_address(conn, bid)) == FIRST_CHUNK
    print(f"broadcast() returned in {took:.3f} s (a figure: bench/enqueue.py measures it)")
    st = status(conn, cid)
    assert (st.status, st.counts.total, st.enqueue_done) == ("sending", FIRST_CHUNK, False)

    with ThreadWorker(db_url, catcher.url, concurrency=5, enqueue_chunk=700):
        assert wait_until(lambda: status(conn, cid).status == "sent", 120)
    st = status(conn, cid)
    assert (st.counts.total, st.counts.sent, st.enqueue_done) == (6000, 6000, True)
    assert set(jobs_by_address(conn, bid).values()) == {1}
    assert len(jobs_by_address(conn, bid)) == len(emails)
    counts = catcher.count_by_rcpt()
    assert sorted(counts) == sorted(emails) and set(counts.values()) == {1}
    # The broadcast's total is kept as chunks land (the campaign list reads it).
    again = broadcast(conn, cid)
    assert again == (bid, 6000, False)


def test_worker_killed_mid_enqueue_leaves_every_recipient_one_job_and_one_message(
    conn: Conn, db_url: str, catcher: Catcher, fleet: Fleet, slow_chunks: None
) -> None:
    emails = seed_many(conn, "big", 5000)
    cid = new_campaign(conn, "big")
    bid, _, _ = broadcast(conn, cid)
    # Paused: the first worker only enqueues, so the count at the server is exact.
    pause(conn, cid)
    env = worker_env(db_url, catcher.url, SENDDOCK_ENQUEUE_CHUNK="400")
    first = fleet.start(env, "killed-mid-chunk")
    worker_id(conn, first)
    # Kill it inside a chunk (its INSERT is running), after it committed a few.
    assert wait_until(
        lambda: (
            len(jobs_by_address(conn, bid)) >= FIRST_CHUNK + 800
            and chunk_in_flight(conn, first.appname)
        ),
        60,
        every=0.01,
    ), first.text()
    first.kill()
    assert wait_until(lambda: sessions_gone(conn, first), 30)
    before = len(jobs_by_address(conn, bid))
    parts = conn.execute(
        "SELECT after_id, last_id FROM broadcast_enqueues WHERE broadcast_id = %s", (bid,)
    ).fetchall()
    assert parts, "the killed worker finished the enqueue: no crash mid-enqueue"
    # The killed chunk left nothing: no job past the cursor of any part still being enqueued.
    for part in parts:
        past = conn.execute(
            "SELECT count(*) AS n FROM broadcast_jobs WHERE broadcast_id = %s"
            " AND subscriber_id > %s AND subscriber_id <= %s",
            (bid, part["after_id"], part["last_id"]),
        ).fetchone()
        assert past == {"n": 0}, part
    assert 0 < before < len(emails)
    assert status(conn, cid).enqueue_done is False

    resume(conn, cid)
    fleet.start(env, "replacement")
    assert wait_until(lambda: status(conn, cid).status == "sent", 120)
    per_address = jobs_by_address(conn, bid)
    assert sorted(per_address) == sorted(emails) and set(per_address.values()) == {1}
    counts = catcher.count_by_rcpt()
    assert sorted(counts) == sorted(emails) and set(counts.values()) == {1}
    st = status(conn, cid)
    assert (st.counts.total, st.counts.sent, st.enqueue_done) == (5000, 5000, True)


def test_cancel_mid_enqueue_rolls_back_the_chunk_in_flight_and_stops_the_enqueue(
    conn: Conn, db_url: str, catcher: Catcher, slow_chunks: None
) -> None:
    seed_many(conn, "big", 4000)
    cid = new_campaign(conn, "big")
    bid, _, _ = broadcast(conn, cid)
    pause(conn, cid)
    chunker = connect(db_url)
    chunk = threading.Thread(target=enqueue_chunk, args=(chunker, bid, 1000))
    chunk.start()
    assert wait_until(lambda: chunk_in_flight(conn), 10, every=0.01)
    n = cancel(conn, cid)  # commits while the chunk is inserting
    chunk.join(10)
    chunker.close()
    assert n == FIRST_CHUNK
    # The chunk saw the cancel before committing and rolled back; the enqueue stops.
    assert len(jobs_by_address(conn, bid)) == FIRST_CHUNK
    assert enqueue_all(conn) == 0 and not enqueuing(conn, bid)
    st = status(conn, cid)
    assert (st.status, st.counts.total, st.counts.cancelled, st.enqueue_done) == (
        "cancelled",
        FIRST_CHUNK,
        FIRST_CHUNK,
        True,
    )
    with ThreadWorker(db_url, catcher.url, concurrency=2):
        time.sleep(1.5)
    assert catcher.received_count() == 0
    assert unfinished(conn, bid) == 0


def test_a_big_broadcast_is_enqueued_in_parts_by_cooperating_workers(
    conn: Conn, db_url: str
) -> None:
    emails = seed_many(conn, "big", 2 * CHUNK + 10)
    cid = new_campaign(conn, "big")
    bid, _, _ = broadcast(conn, cid)
    parts = conn.execute(
        "SELECT part, after_id, last_id FROM broadcast_enqueues WHERE broadcast_id = %s"
        " ORDER BY part",
        (bid,),
    ).fetchall()
    assert [p["part"] for p in parts] == list(range(PARTS))
    assert parts[-1]["last_id"] == len(emails)
    # Two connections enqueue the two parts at once; together they make every job once.
    others = [connect(db_url) for _ in range(PARTS)]
    threads = [threading.Thread(target=enqueue_all, args=(c, bid, 20_000)) for c in others]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for c in others:
        c.close()
    per_address = jobs_by_address(conn, bid)
    assert len(per_address) == len(emails) and set(per_address.values()) == {1}
    st = status(conn, cid)
    assert (st.counts.total, st.counts.pending, st.enqueue_done) == (len(emails), len(emails), True)
    assert broadcast(conn, cid) == (bid, len(emails), False)


def test_status_shows_progress_and_nothing_finishes_before_the_last_chunk(conn: Conn) -> None:
    seed_many(conn, "big", 3500)
    cid = new_campaign(conn, "big")
    bid, so_far, _ = broadcast(conn, cid)
    assert so_far == FIRST_CHUNK
    # Every job enqueued so far has ended: still not finished, more are coming.
    conn.execute("UPDATE broadcast_jobs SET status = 'sent' WHERE broadcast_id = %s", (bid,))
    conn.execute(QUERIES["finish"])
    st = status(conn, cid)
    assert (st.status, st.counts.total, st.counts.sent, st.enqueue_done) == (
        "sending",
        FIRST_CHUNK,
        FIRST_CHUNK,
        False,
    )
    chunk = enqueue_chunk(conn, bid, 1000)
    assert chunk is not None and (chunk.jobs, chunk.done) == (1000, False)
    assert status(conn, cid).counts.total == FIRST_CHUNK + 1000
    assert enqueue_all(conn, bid, 1000) == 1500
    st = status(conn, cid)
    assert (st.status, st.counts.total, st.counts.pending, st.enqueue_done) == (
        "sending",
        3500,
        2500,
        True,
    )
    conn.execute("UPDATE broadcast_jobs SET status = 'sent' WHERE broadcast_id = %s", (bid,))
    assert status(conn, cid).status == "sent"


def test_a_job_that_exists_already_is_skipped_and_the_rest_of_its_chunk_lands(
    conn: Conn,
) -> None:
    """Chunks never overlap, so each goes in as a plain INSERT; should the unique key refuse a
    row all the same (here a job made by hand past the cursor), the chunk goes in again
    without it, and every subscriber still has one job."""
    seed_many(conn, "big", 2500)
    cid = new_campaign(conn, "big")
    bid, _, _ = broadcast(conn, cid)
    conn.execute(
        "INSERT INTO broadcast_jobs (broadcast_id, subscriber_id, email, message_id)"
        " SELECT %s, id, email, '<by-hand@example.com>' FROM subscribers WHERE email = %s",
        (bid, "big1500@example.com"),
    )
    assert enqueue_all(conn, bid) == 2500 - FIRST_CHUNK - 1
    got = jobs_by_address(conn, bid)
    assert len(got) == 2500 and set(got.values()) == {1}
    row = conn.execute(
        "SELECT message_id FROM broadcast_jobs WHERE broadcast_id = %s AND email = %s",
        (bid, "big1500@example.com"),
    ).fetchone()
    assert row == {"message_id": "<by-hand@example.com>"}  # the job that was there stays
    assert status(conn, cid).enqueue_done is True


def test_people_who_join_after_send_are_not_swept_into_the_broadcast(conn: Conn) -> None:
    seed_many(conn, "big", 2500)
    seed_list(conn, "other", ["old@example.com"])  # subscribed before the send, not on `big`
    cid = new_campaign(conn, "big")
    bid, _, _ = broadcast(conn, cid)
    seed_list(conn, "big", ["new@example.com", "old@example.com"])
    enqueue_all(conn, bid)
    got = jobs_by_address(conn, bid)
    assert len(got) == 2500 and "new@example.com" not in got and "old@example.com" not in got


def test_a_subscriber_with_jobs_cannot_be_deleted(conn: Conn) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    broadcast(conn, new_campaign(conn, "news"))
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        conn.execute("DELETE FROM subscribers WHERE lower(email) = 'ada@example.com'")
