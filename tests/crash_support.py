"""Helpers for the crash and liveness tests: worker processes, an audit of hand-backs, tallies.

The audit is a trigger on `broadcast_jobs` (an observer only): a `sending` row that loses its
owner with its attempt kept was rescued; with its attempt given back it was released.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from senddock import queue
from senddock.delivery.rescuer import LOCK_CLASS
from senddock.testing import Catcher
from senddock.testing.proof import at_server
from senddock.testing.workers import WorkerProcess
from support import Conn, wait_until

Row = dict[str, Any]


class Fleet:
    """The worker processes a test started; whatever is left alive is killed by close()."""

    def __init__(self, logs: Path, concurrency: int) -> None:
        self.dir = logs
        self.concurrency = concurrency
        self.procs: list[WorkerProcess] = []

    def start(self, env: dict[str, str], name: str = "worker") -> WorkerProcess:
        log = self.dir / f"{len(self.procs):02d}-{name}.log"
        appname = f"senddock-test-{len(self.procs)}-{name}"[:63]
        env = {**env, "PGAPPNAME": appname}
        proc = WorkerProcess.start(env, log=log, name=name, concurrency=self.concurrency)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.alive():
                proc.kill()

    def logs(self) -> str:
        return "\n".join(f"===== {p.log} (pid {p.pid})\n{p.text()}" for p in self.procs)


def fleet_for(request: pytest.FixtureRequest, logs: Path, concurrency: int) -> Iterator[Fleet]:
    """The body of a `fleet` fixture: kill leftovers at teardown, print the logs on failure."""
    failed_before = request.session.testsfailed
    fleet = Fleet(logs, concurrency)
    try:
        yield fleet
    finally:
        fleet.close()
        if request.session.testsfailed > failed_before:
            print(fleet.logs())


class Handbacks:
    """Every rescue (to retry, failed or unconfirmed) and release of a `sending` job, recorded
    by a trigger while installed."""

    INSTALL = """
    DROP TRIGGER IF EXISTS test_note_handback ON broadcast_jobs;
    DROP TABLE IF EXISTS test_handbacks;
    CREATE TABLE test_handbacks (
        job_id   bigint NOT NULL,
        owner    bigint,
        attempts integer NOT NULL,
        kind     text NOT NULL,
        reply    text,
        at       timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE OR REPLACE FUNCTION test_note_handback() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO test_handbacks (job_id, owner, attempts, kind, reply)
        VALUES (OLD.id, OLD.owner, OLD.attempts,
                CASE WHEN NEW.deaths > OLD.deaths OR NEW.status = 'unconfirmed' THEN 'rescue'
                     ELSE 'release' END,
                NEW.last_reply);
        RETURN NULL;
    END $$;
    CREATE TRIGGER test_note_handback AFTER UPDATE ON broadcast_jobs FOR EACH ROW
        -- A rescue to unconfirmed (issue 23) keeps the owner; it is a rescue all the same.
        WHEN (OLD.status = 'sending' AND NEW.status <> 'sending'
              AND (NEW.owner IS NULL OR NEW.last_stage = 'rescue'))
        EXECUTE FUNCTION test_note_handback();
    """
    REMOVE = """
    DROP TRIGGER IF EXISTS test_note_handback ON broadcast_jobs;
    DROP FUNCTION IF EXISTS test_note_handback();
    DROP TABLE IF EXISTS test_handbacks;
    """

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        conn.execute(self.INSTALL)

    def remove(self) -> None:
        self.conn.execute(self.REMOVE)

    def all(self) -> list[Row]:
        return self.conn.execute("SELECT * FROM test_handbacks ORDER BY at").fetchall()

    def rescues(self) -> list[Row]:
        return [h for h in self.all() if h["kind"] == "rescue"]

    def releases(self) -> list[Row]:
        return [h for h in self.all() if h["kind"] == "release"]

    @classmethod
    def installed(cls, conn: Conn) -> Iterator[Handbacks]:
        """The body of a `handbacks` fixture: the trigger lives for one test."""
        audit = cls(conn)
        try:
            yield audit
        finally:
            audit.remove()


def worker_id(conn: Conn, proc: WorkerProcess) -> int:
    """The id under which `proc` registered (waits for it to register)."""
    found: list[int] = []

    def registered() -> bool:
        row = conn.execute("SELECT id FROM workers WHERE pid = %s", (proc.pid,)).fetchone()
        if row is not None:
            found.append(int(row["id"]))
        return bool(found) or not proc.alive()

    assert wait_until(registered, 30) and found, f"{proc.name} never registered:\n{proc.text()}"
    return found[0]


def held_by(conn: Conn, owner: int) -> set[int]:
    """Ids of the jobs in `sending` owned by `owner`."""
    rows = conn.execute(
        "SELECT id FROM broadcast_jobs WHERE status = 'sending' AND owner = %s", (owner,)
    ).fetchall()
    return {int(r["id"]) for r in rows}


def sent_by(conn: Conn, owner: int) -> int:
    """How many jobs `owner` recorded as sent (an outcome keeps the owner on the row)."""
    row = conn.execute(
        "SELECT count(*) AS n FROM broadcast_jobs WHERE status = 'sent' AND owner = %s", (owner,)
    ).fetchone()
    assert row is not None
    return int(row["n"])


def as_the_relay_log_says(conn: Conn, bid: int, catcher: Catcher) -> bool:
    """Once only sent and unconfirmed jobs are left, do what a person reading the relay's log
    does (the catcher is that log): confirm the unconfirmed it accepted, resend the rest. True
    once nothing was left to do (issue 23)."""
    rows = conn.execute(
        "SELECT id, lower(email) AS email, status FROM broadcast_jobs WHERE broadcast_id = %s",
        (bid,),
    ).fetchall()
    if {r["status"] for r in rows} - {"sent", "unconfirmed"}:
        return False
    held = [r for r in rows if r["status"] == "unconfirmed"]
    if not held:
        return True
    got = catcher.count_by_rcpt()
    with conn.transaction():
        queue.confirm(conn, bid, [int(r["id"]) for r in held if got[r["email"]]])
        queue.resend_unconfirmed(conn, bid, [int(r["id"]) for r in held if not got[r["email"]]])
    return False


def campaign_done(conn: Conn, cid: int) -> bool:
    """The campaign row says `sent` (set by a worker, not by this read)."""
    row = conn.execute("SELECT status FROM campaigns WHERE id = %s", (cid,)).fetchone()
    return row is not None and row["status"] == "sent"


def sessions_gone(conn: Conn, proc: WorkerProcess) -> bool:
    """Postgres has closed every session of `proc`: whatever it had sent has been processed."""
    row = conn.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = %s",
        (proc.appname,),
    ).fetchone()
    assert row is not None
    return int(row["n"]) == 0


def held_at_death(conn: Conn, proc: WorkerProcess, wid: int, audit: Handbacks) -> set[int]:
    """The jobs a killed worker held: once its sessions are gone (so a commit it had already
    sent cannot land later), those still `sending` under its id plus those already rescued."""
    assert wait_until(lambda: sessions_gone(conn, proc), 30), f"{proc.name} sessions linger"
    held = held_by(conn, wid)  # read before the audit, so a rescue in between is in the audit
    return held | {int(h["job_id"]) for h in audit.rescues() if h["owner"] == wid}


def lock_free(conn: Conn, wid: int) -> bool:
    """The worker's advisory liveness lock is no longer held by anyone."""
    row = conn.execute(
        "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND classid = %s"
        " AND objid = %s AND objsubid = 2 AND granted"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        (LOCK_CLASS, wid),
    ).fetchone()
    assert row is not None
    return int(row["n"]) == 0


def extra_copies(catcher: Catcher, rows: dict[str, Row]) -> dict[str, int]:
    """Check what the server received: every job's recipient got its message, every copy
    carries the job's Message-ID, nobody else got anything. Recipients -> extra copies."""
    proof = at_server(catcher.received(), rows)
    undelivered = proof.undelivered
    assert not undelivered, f"{len(undelivered)} never delivered, e.g. {undelivered[:5]}"
    strangers = proof.strangers()
    assert not strangers, f"messages to addresses with no job: {strangers[:5]}"
    for rcpt, got in proof.copies.items():
        ids = [r.message_id for r in got]
        assert set(ids) == {rows[rcpt]["message_id"]}, f"{rcpt} got Message-IDs {ids}"
    return proof.extra


def addresses(n: int, prefix: str = "user") -> list[str]:
    return [f"{prefix}{i}@example.com" for i in range(n)]
