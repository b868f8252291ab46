"""Helpers the tests share: seeding rows, running real workers, waiting on real outcomes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

import forkserver
from senddock.audience.lists import ensure_list
from senddock.campaigns import broadcast, create_campaign
from senddock.campaigns.broadcast import enqueue_all
from senddock.config import Settings
from senddock.db import connect
from senddock.runtime import build_worker
from senddock.testing import Catcher, Fault
from senddock.testing.workers import Process, WorkerProcess

Conn = psycopg.Connection[dict[str, Any]]

# Short enough to run, long enough that a retry is visibly scheduled in the future.
FAST_RETRIES = "0.2,0.2,0.2,0.2,0.2"


def seed_list(conn: Conn, list_name: str, emails: list[str]) -> int:
    """Subscribe `emails` (confirmed) to `list_name` with set-based SQL; the list id."""
    list_id = ensure_list(conn, list_name)
    with conn.transaction():
        conn.execute(
            "INSERT INTO subscribers (email, name)"
            " SELECT e, 'Name ' || ord FROM unnest(%s::text[]) WITH ORDINALITY AS t(e, ord)"
            " ON CONFLICT ((lower(email))) DO NOTHING",
            (emails,),
        )
        conn.execute(
            "INSERT INTO list_memberships (list_id, subscriber_id)"
            " SELECT %s, id FROM subscribers WHERE lower(email) = ANY(%s::text[])"
            " ON CONFLICT DO NOTHING",
            (list_id, [e.lower() for e in emails]),
        )
    return list_id


def new_campaign(conn: Conn, list_name: str, name: str = "c") -> int:
    return create_campaign(
        conn,
        name=name,
        list_name=list_name,
        subject="Hello {{ subscriber.name }}",
        from_addr="News <news@example.org>",
        text_body="Hi {{ subscriber.name }}, this is {{ email }}.\n",
    )


def send_campaign(
    conn: Conn, list_name: str, emails: list[str], name: str = "c"
) -> tuple[int, int]:
    """Seed, create and enqueue a campaign, all of it now: (campaign id, broadcast id)."""
    seed_list(conn, list_name, emails)
    cid = new_campaign(conn, list_name, name)
    bid, _, _ = broadcast(conn, cid)
    enqueue_all(conn, bid)  # what workers do in the background (test_enqueue_background.py)
    return cid, bid


def jobs(conn: Conn, broadcast_id: int) -> dict[str, dict[str, Any]]:
    """Every job of a broadcast by lower-cased address."""
    rows = conn.execute(
        "SELECT * FROM broadcast_jobs WHERE broadcast_id = %s", (broadcast_id,)
    ).fetchall()
    return {str(r["email"]).lower(): r for r in rows}


def unfinished(conn: Conn, broadcast_id: int) -> int:
    row = conn.execute(
        "SELECT count(*) AS n FROM broadcast_jobs WHERE broadcast_id = %s"
        " AND status IN ('pending', 'sending', 'retry')",
        (broadcast_id,),
    ).fetchone()
    assert row is not None
    return int(row["n"])


def wait_until(pred: Callable[[], bool], timeout: float = 60.0, every: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(every)
    return pred()


class ThreadWorker:
    """A real Worker running in a thread of the test process (its own event loop)."""

    def __init__(self, url: str, smtp_url: str, concurrency: int = 5, **overrides: Any) -> None:
        overrides.setdefault("retry_schedule", FAST_RETRIES)
        self.settings = Settings(database_url=url, smtp_url=smtp_url, **overrides)
        self.worker = build_worker(self.settings, url, concurrency)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.exit_code: int | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        async def main() -> int:
            self._loop = asyncio.get_running_loop()
            return await self.worker.run()

        try:
            self.exit_code = asyncio.run(main())
        except BaseException as exc:
            self.error = exc

    def __enter__(self) -> ThreadWorker:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self, timeout: float = 30.0) -> None:
        while self._loop is None and self._thread.is_alive():
            time.sleep(0.01)
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self.worker.stop)
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "worker did not stop"
        if self.error is not None:
            raise self.error


def worker_env(url: str, smtp_url: str, **extra: str) -> dict[str, str]:
    """Environment for a `senddock` subprocess against the test database and SMTP server."""
    src = str(Path(__file__).resolve().parent.parent / "src")
    env = dict(os.environ)
    env.update(
        SENDDOCK_DATABASE_URL=url,
        SENDDOCK_SMTP_URL=smtp_url,
        SENDDOCK_RETRY_SCHEDULE=FAST_RETRIES,
        PYTHONPATH=src + os.pathsep + env.get("PYTHONPATH", ""),
    )
    env.update(extra)
    return env


def senddock(
    env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the real `senddock` command line, in a process of its own forked from a process
    that has imported it already (tests/forkserver.py)."""
    return forkserver.run(args, env, timeout=timeout)


def start_worker(env: dict[str, str], concurrency: int = 5, log: Path | None = None) -> Process:
    """Start a real `senddock worker` process (one: `senddock worker` alone runs one a core)."""
    return WorkerProcess.start(env, log=log, concurrency=concurrency).popen


def server_older_than_a_lease(conn: Conn, lease: float = 15.0) -> None:
    """Wait until the Postgres server has run longer than a lease. A worker's lease counts from
    the later of its last heartbeat and the server's start, so on a younger server no worker,
    however old its heartbeat, is dead yet: a test about a dead one, run first, waits here."""
    row = conn.execute(
        "SELECT extract(epoch FROM now() - pg_postmaster_start_time())::float8 AS age"
    ).fetchone()
    assert row is not None
    time.sleep(max(0.0, lease + 2.0 - float(row["age"])))


def db(url: str) -> Conn:
    return connect(url)


def plan_nodes(conn: Conn, sql: str, params: Any) -> list[dict[str, Any]]:
    """Every node (and every other object) of `EXPLAIN (FORMAT JSON) sql`, depth first."""
    row = conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()
    assert row is not None
    plan = row["QUERY PLAN"]
    found: list[dict[str, Any]] = []

    def walk(part: Any) -> None:
        if isinstance(part, dict):
            found.append(part)
            for value in part.values():
                walk(value)
        elif isinstance(part, list):
            for item in part:
                walk(item)

    walk(json.loads(plan) if isinstance(plan, str) else plan)
    return found


def paced(seconds: float = 0.02) -> Catcher:
    """A relay that takes a moment per message, so a broadcast lasts long enough to act on
    (a pipelined worker sends thousands a second to an unpaced one)."""
    return Catcher(fault_for=lambda _addr: Fault.stall(seconds, attempts=None))
