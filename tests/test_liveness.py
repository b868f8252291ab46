"""Rescue only the dead (DESIGN.md invariant 5), judged while peers keep sending.

A live worker stuck in a slow SMTP call past its lease keeps its job; a dead peer's jobs are
taken back by a live worker with no restart: at once when the pid check can tell (same host),
and only once its lease has lapsed on the database clock when it cannot (another host).
Rescues are read from an audit trigger (crash_support.Handbacks).
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta

import pytest

from crash_support import (
    Fleet,
    Handbacks,
    addresses,
    as_the_relay_log_says,
    campaign_done,
    extra_copies,
    held_at_death,
    worker_id,
)
from senddock.testing import Catcher
from support import Conn, ThreadWorker, jobs, send_campaign, unfinished, wait_until, worker_env

CONCURRENCY = 5
LEASE = 2.0
HEARTBEAT = 0.5
# Every worker of a test, thread or process, runs with the same short lease.
LIVENESS = {"lease_seconds": LEASE, "heartbeat_interval": HEARTBEAT}
LIVENESS_ENV = {"SENDDOCK_LEASE_SECONDS": str(LEASE), "SENDDOCK_HEARTBEAT_INTERVAL": str(HEARTBEAT)}
LOST_CLAIM = ("declared dead", "was lost before its outcome")


def test_a_live_worker_stalled_past_its_lease_keeps_its_job(
    conn: Conn,
    db_url: str,
    catcher: Catcher,
    handbacks: Handbacks,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="senddock")
    stalled = "stall-slow@example.com"  # the catcher sits 5 s on its DATA, then accepts
    emails = [stalled, *addresses(300)]
    cid, bid = send_campaign(conn, "news", emails)
    with (
        ThreadWorker(db_url, catcher.url, CONCURRENCY, smtp_timeout=10, **LIVENESS) as one,
        ThreadWorker(db_url, catcher.url, CONCURRENCY, smtp_timeout=10, **LIVENESS) as peer,
    ):
        assert wait_until(lambda: campaign_done(conn, cid), 60), unfinished(conn, bid)
        ids = {one.worker.worker_id, peer.worker.worker_id}

    rows = jobs(conn, bid)
    job = rows[stalled]
    # The premise: the SMTP call outlived the lease (database clock) while both peers swept.
    assert job["sent_at"] - job["claimed_at"] > timedelta(seconds=LEASE)
    assert (job["status"], job["attempts"]) == ("sent", 1)
    assert job["owner"] in ids
    assert handbacks.rescues() == [], "a live worker's job was rescued"
    assert catcher.count_by_rcpt() == Counter({e: 1 for e in emails})
    assert Counter(r["status"] for r in rows.values()) == Counter(sent=len(emails))
    lost = [r.getMessage() for r in caplog.records if any(w in r.getMessage() for w in LOST_CLAIM)]
    assert lost == []


def test_a_killed_peer_on_this_host_is_rescued_by_a_live_one_at_once(
    conn: Conn, db_url: str, catcher: Catcher, fleet: Fleet, handbacks: Handbacks
) -> None:
    emails = addresses(2000)
    cid, bid = send_campaign(conn, "news", emails)
    proc = fleet.start(worker_env(db_url, catcher.url, **LIVENESS_ENV), "killed")
    dead = worker_id(conn, proc)
    with ThreadWorker(db_url, catcher.url, CONCURRENCY, **LIVENESS) as live:
        assert catcher.wait_for(300, timeout=60)
        assert unfinished(conn, bid) > 0
        proc.kill()
        left = held_at_death(conn, proc, dead, handbacks)
        assert left, "the kill landed while the worker held no claim"
        # No restart: the live peer sees the lock free and the pid gone, and takes them back.
        assert wait_until(lambda: {h["job_id"] for h in handbacks.rescues()} >= left, 15)
        assert wait_until(
            lambda: as_the_relay_log_says(conn, bid, catcher) and campaign_done(conn, cid), 60
        ), unfinished(conn, bid)
        live_id = live.worker.worker_id

    assert {h["owner"] for h in handbacks.rescues()} == {dead}
    assert {h["job_id"] for h in handbacks.rescues()} == left
    _all_sent_the_rescued_by(conn, catcher, bid, len(emails), left, live_id)


def test_a_killed_peer_on_another_host_is_rescued_once_its_lease_lapses(
    conn: Conn, db_url: str, catcher: Catcher, fleet: Fleet, handbacks: Handbacks
) -> None:
    emails = addresses(2000)
    cid, bid = send_campaign(conn, "news", emails)
    proc = fleet.start(worker_env(db_url, catcher.url, **LIVENESS_ENV), "killed-elsewhere")
    dead = worker_id(conn, proc)
    # As its peers see it, this worker runs on another machine: no pid to check, only its lease.
    conn.execute("UPDATE workers SET host = 'another-host.example' WHERE id = %s", (dead,))
    with ThreadWorker(db_url, catcher.url, CONCURRENCY, **LIVENESS) as live:
        assert catcher.wait_for(300, timeout=60)
        assert unfinished(conn, bid) > 0
        proc.kill()
        left = held_at_death(conn, proc, dead, handbacks)
        assert left, "the kill landed while the worker held no claim"
        row = conn.execute("SELECT heartbeat_at FROM workers WHERE id = %s", (dead,)).fetchone()
        assert row is not None, "declared dead before its lease could lapse"
        last_beat = row["heartbeat_at"]
        assert wait_until(lambda: {h["job_id"] for h in handbacks.rescues()} >= left, 15)
        assert wait_until(
            lambda: as_the_relay_log_says(conn, bid, catcher) and campaign_done(conn, cid), 60
        ), unfinished(conn, bid)
        live_id = live.worker.worker_id

    rescues = handbacks.rescues()
    assert {h["owner"] for h in rescues} == {dead}
    assert {h["job_id"] for h in rescues} == left
    # Not before the lease lapsed, as the database's clock tells it.
    assert min(h["at"] for h in rescues) - last_beat > timedelta(seconds=LEASE)
    _all_sent_the_rescued_by(conn, catcher, bid, len(emails), left, live_id)


def _all_sent_the_rescued_by(
    conn: Conn, catcher: Catcher, bid: int, n: int, left: set[int], live_id: int
) -> None:
    """Every job sent; the live peer sent each rescued one never started again, as a suspect
    whose killed attempt was given back (issue 18: a death charges nobody who was not alone in
    it), with the death counted. A rescued one whose dot had gone was unconfirmed (issue 23:
    at most one a session), then confirmed or resent as the relay's log said; nobody twice."""
    rows = jobs(conn, bid)
    by_id = {r["id"]: r for r in rows.values()}
    assert Counter(r["status"] for r in rows.values()) == Counter(sent=n)
    settled = {i for i in left if by_id[i]["last_stage"] in ("confirm", "resend")}
    settled |= {i for i in left if by_id[i]["deaths"] == 0}
    assert len(settled) <= CONCURRENCY
    assert {
        (by_id[i]["owner"], by_id[i]["attempts"], by_id[i]["deaths"]) for i in left - settled
    } <= {(live_id, 1, 1)}
    extra = extra_copies(catcher, rows)
    assert extra == {}
