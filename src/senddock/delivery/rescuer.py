"""Liveness and rescue: who is alive, who is dead, and taking back only what the dead held.

How liveness is known (invariant 5):
- Each worker process registers a row in `workers` and, on its heartbeat connection, holds a
  session advisory lock keyed on its id. It writes `heartbeat_at = now()` (the database clock)
  every `heartbeat_interval` seconds from a task of its own, so a slow SMTP call never delays it.
- A worker is dead when either
  (a) its heartbeat is older than `lease_seconds`, measured on the database clock from the later
      of its last heartbeat and the Postgres server's start (a Postgres restart gives every
      worker a full lease to come back), or
  (b) it ran on this very host (same hostname and boot id) and its advisory lock is free and its
      process (pid with the same start time) is gone, or the host has rebooted since: a crashed
      worker is rescued by its replacement at once, with no lease to wait out.
- A live worker fences itself: it starts no new message unless its last heartbeat succeeded
  within half a lease, and a heartbeat that finds its row gone (declared dead) makes it drop
  every claim it holds without sending. So a worker can only be declared dead once it has
  stopped sending, and outcome writes of a declared-dead worker are refused by the fence.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import AsyncConnection

from senddock import queue
from senddock.delivery.maintainer import Service
from senddock.delivery.state import Lease

AsyncConn = AsyncConnection[dict[str, Any]]

LOCK_CLASS = 0x5344  # first key of every worker's advisory lock; the second is the worker id


@dataclass(frozen=True)
class Identity:
    """Who this process is, in a form a peer on the same host can check."""

    host: str
    boot_id: str
    pid: int
    pid_started: str

    @classmethod
    def current(cls) -> Identity:
        pid = os.getpid()
        return cls(socket.gethostname(), _boot_id(), pid, process_start(pid) or "")


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> str | None:
    """The start time of process `pid` in clock ticks since boot, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[19]  # field 22 of stat(5), counting from the one after the command name


def process_alive(pid: int, started: str) -> bool:
    """Is the process that registered as (pid, started) still running here?"""
    now = process_start(pid)
    return now is not None and (not started or now == started)


REGISTER = """
INSERT INTO workers (host, boot_id, pid, pid_started, concurrency)
VALUES (%(host)s, %(boot_id)s, %(pid)s, %(pid_started)s, %(concurrency)s)
RETURNING id
"""
HEARTBEAT = "UPDATE workers SET heartbeat_at = now() WHERE id = %(id)s RETURNING id"
LOCK = "SELECT pg_advisory_lock(%(cls)s, %(id)s::int)"
STOPPING = "UPDATE workers SET stopping = true WHERE id = %(id)s"
DEREGISTER = "DELETE FROM workers WHERE id = %(id)s"

# Peers as the database sees them: heartbeat age on the database clock (from the later of the
# heartbeat and the server's start) and whether the peer's heartbeat connection holds its lock.
PEERS = """
SELECT w.id, w.host, w.boot_id, w.pid, w.pid_started,
       extract(epoch FROM now() - greatest(w.heartbeat_at, pg_postmaster_start_time()))
           AS age,
       EXISTS (SELECT 1 FROM pg_locks l
               WHERE l.locktype = 'advisory' AND l.classid = %(cls)s AND l.objsubid = 2
                 AND l.objid::bigint = w.id AND l.granted
                 -- worker ids repeat across databases on one server: only ours count
                 AND l.database = (SELECT oid FROM pg_database
                                   WHERE datname = current_database())) AS locked
FROM workers w WHERE w.id <> %(me)s
"""
# Owners of `sending` jobs that have no row at all (their row was removed as dead).
UNKNOWN_OWNERS = """
SELECT DISTINCT j.owner AS id FROM broadcast_jobs j
WHERE j.status = 'sending' AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.id = j.owner)
"""
# Declare dead, and write down each death with what it held (worker_deaths: `campaign status`,
# the dashboard and /metrics show them). For a lease lapse the age is checked again in the same
# statement, so a heartbeat that landed since the look keeps the worker alive. The reason is the
# one its supervisor or its own last words left (`exit_reason`), else how it was found dead.
BURY = """
WITH buried AS (
    DELETE FROM workers w
    WHERE w.id = ANY(%(known_dead)s::bigint[])
       OR (w.id = ANY(%(lapsed)s::bigint[])
           AND now() - greatest(w.heartbeat_at, pg_postmaster_start_time())
               > make_interval(secs => %(lease)s))
    RETURNING w.id, w.host, w.pid, w.started_at, w.heartbeat_at, w.exit_reason
), held AS (
    SELECT j.owner, count(*) AS n, array_agg(DISTINCT j.broadcast_id) AS broadcast_ids
    FROM broadcast_jobs j
    WHERE j.status = 'sending' AND j.owner IN (SELECT id FROM buried)
    GROUP BY j.owner
), noted AS (
    INSERT INTO worker_deaths
        (worker_id, host, pid, started_at, last_heartbeat, reason, jobs_held, broadcast_ids)
    SELECT b.id, b.host, b.pid, b.started_at, b.heartbeat_at,
           coalesce(b.exit_reason,
                    CASE WHEN b.id = ANY(%(known_dead)s::bigint[])
                         THEN 'process gone (no exit status known: SIGKILL, OOM or a crash)'
                         ELSE 'no heartbeat for '
                              || round(extract(epoch FROM now() - b.heartbeat_at))::text || ' s'
                    END),
           coalesce(h.n, 0), coalesce(h.broadcast_ids, '{}')
    FROM buried b LEFT JOIN held h ON h.owner = b.id
)
SELECT id FROM buried
"""
# A worker that stops on an error it cannot outlast says why before it deregisters.
LAST_WORDS = """
WITH gone AS (
    DELETE FROM workers w WHERE w.id = %(id)s
    RETURNING w.id, w.host, w.pid, w.started_at, w.heartbeat_at
)
INSERT INTO worker_deaths
    (worker_id, host, pid, started_at, last_heartbeat, reason, jobs_held, broadcast_ids)
SELECT g.id, g.host, g.pid, g.started_at, g.heartbeat_at, %(reason)s,
       (SELECT count(*) FROM broadcast_jobs j WHERE j.owner = g.id AND j.status = 'sending'),
       coalesce((SELECT array_agg(DISTINCT j.broadcast_id) FROM broadcast_jobs j
                 WHERE j.owner = g.id AND j.status = 'sending'), '{}')
FROM gone g
"""
# The supervisor's word on a child that exited: on its row if it is still there, else on the
# death its peer wrote down a moment ago.
EXIT_REASON = """
WITH live AS (
    UPDATE workers SET exit_reason = %(reason)s
    WHERE host = %(host)s AND pid = %(pid)s AND pid_started = %(pid_started)s
    RETURNING id
)
UPDATE worker_deaths d SET reason = %(reason)s
WHERE NOT EXISTS (SELECT 1 FROM live) AND d.id = (
    SELECT id FROM worker_deaths
    WHERE host = %(host)s AND pid = %(pid)s AND found_at > now() - interval '10 minutes'
    ORDER BY found_at DESC LIMIT 1)
"""


async def register(conn: AsyncConn, me: Identity, concurrency: int) -> int:
    """Insert this worker's row and take its lock on `conn` (which must stay open)."""
    cur = await conn.execute(
        REGISTER,
        {
            "host": me.host,
            "boot_id": me.boot_id,
            "pid": me.pid,
            "pid_started": me.pid_started,
            "concurrency": concurrency,
        },
    )
    row = await cur.fetchone()
    assert row is not None
    worker_id = int(row["id"])
    await conn.execute(LOCK, {"cls": LOCK_CLASS, "id": worker_id})
    return worker_id


async def relock(conn: AsyncConn, worker_id: int) -> None:
    """Take this worker's lock again on a new heartbeat connection."""
    await conn.execute(LOCK, {"cls": LOCK_CLASS, "id": worker_id})


async def heartbeat(conn: AsyncConn, worker_id: int) -> bool:
    """Refresh the heartbeat; False when this worker was declared dead."""
    cur = await conn.execute(HEARTBEAT, {"id": worker_id})
    return await cur.fetchone() is not None


async def mark_stopping(conn: AsyncConn, worker_id: int) -> None:
    await conn.execute(STOPPING, {"id": worker_id})


async def deregister(conn: AsyncConn, worker_id: int, reason: str | None = None) -> None:
    """Remove this worker's row; with a `reason`, as a death, written down with what it held."""
    if reason is None:
        await conn.execute(DEREGISTER, {"id": worker_id})
    else:
        await conn.execute(LAST_WORDS, {"id": worker_id, "reason": reason[:1000]})


def note_exit(conn: psycopg.Connection[Any], ident: Identity, reason: str) -> None:
    """The supervisor's account of how child `ident` ended (exit code, signal, watchdog)."""
    params = {
        "host": ident.host,
        "pid": ident.pid,
        "pid_started": ident.pid_started,
        "reason": reason[:1000],
    }
    conn.execute(EXIT_REASON, params)


async def sweep(
    conn: AsyncConn,
    me: int,
    ident: Identity,
    lease: float,
    *,
    judge_lapses: bool = True,
    hold: bool = True,
) -> int:
    """Declare dead the workers that are, rescue their jobs; the number of jobs rescued.

    `judge_lapses=False`: the caller was itself cut off from the database within the last
    lease, so a peer's lapsed heartbeat proves nothing yet; only the same-host rule applies.
    `hold`: a job whose final dot went becomes unconfirmed (SENDDOCK_UNCONFIRMED=hold), not a
    retry.
    """
    cur = await conn.execute(PEERS, {"cls": LOCK_CLASS, "me": me})
    known_dead: list[int] = []
    lapsed: list[int] = []
    for peer in await cur.fetchall():
        if judge_lapses and float(peer["age"]) > lease:
            lapsed.append(int(peer["id"]))
        elif (
            not peer["locked"]
            and peer["host"] == ident.host
            and (
                peer["boot_id"] != ident.boot_id
                or not process_alive(int(peer["pid"]), str(peer["pid_started"]))
            )
        ):
            known_dead.append(int(peer["id"]))
    async with conn.transaction():
        buried: list[int] = []
        if known_dead or lapsed:
            cur = await conn.execute(
                BURY, {"known_dead": known_dead, "lapsed": lapsed, "lease": lease}
            )
            buried = [int(r["id"]) for r in await cur.fetchall()]
        cur = await conn.execute(UNKNOWN_OWNERS)
        owners = [int(r["id"]) for r in await cur.fetchall() if r["id"] is not None]
        return await queue.rescue(conn, sorted(set(buried) | set(owners)), hold=hold)


log = logging.getLogger("senddock.worker")


class Rescuer(Service):
    """The maintenance service that rescues what dead peers held, on a short period.

    After its own connection comes back from a fault it grants peers a full lease (they were
    likely cut off with us), and it judges no lapse while this process's own lease is stale."""

    name = "rescuer"

    def __init__(
        self,
        lease: Lease,
        ident: Identity,
        wake: asyncio.Event,
        period: float,
        *,
        hold: bool = True,
    ) -> None:
        self.hold = hold
        self.lease = lease
        self.ident = ident
        self.wake = wake
        self.period = period

    async def run_once(self, conn: AsyncConn) -> float | None:
        me, judge = self.lease.worker_id, self.lease.may_judge_lapses()
        n = await sweep(
            conn, me, self.ident, self.lease.seconds, judge_lapses=judge, hold=self.hold
        )
        if n:
            log.warning("rescued %d jobs from dead workers", n)
            self.wake.set()
        return None

    def reconnected(self) -> None:
        self.lease.grant_grace()


LIST = """
SELECT w.id, w.host, w.pid, w.concurrency, w.started_at, w.heartbeat_at, w.stopping,
       extract(epoch FROM now() - w.heartbeat_at)::float AS heartbeat_age,
       (SELECT count(*) FROM broadcast_jobs j WHERE j.owner = w.id AND j.status = 'sending')
           AS holding
FROM workers w ORDER BY w.id
"""


def list_workers(conn: psycopg.Connection[dict[str, Any]]) -> list[dict[str, Any]]:
    """Registered workers with heartbeat age (database clock) and the jobs each holds."""
    return conn.execute(LIST).fetchall()


DEATHS = """
SELECT d.id, d.worker_id, d.host, d.pid, d.started_at, d.last_heartbeat, d.found_at,
       d.reason, d.jobs_held, d.broadcast_ids
FROM worker_deaths d
WHERE %(broadcast_id)s::bigint IS NULL OR d.broadcast_ids @> ARRAY[%(broadcast_id)s::bigint]
ORDER BY d.found_at DESC, d.id DESC
LIMIT %(limit)s
"""
DEATH_COUNT = """
SELECT count(*) AS n, max(found_at) AS last_at FROM worker_deaths d
WHERE %(broadcast_id)s::bigint IS NULL OR d.broadcast_ids @> ARRAY[%(broadcast_id)s::bigint]
"""


@dataclass(frozen=True)
class Deaths:
    """Worker processes found dead (all of them, or those that held a broadcast's jobs)."""

    count: int
    last_at: Any  # datetime | None
    last_reason: str | None
    recent: list[dict[str, Any]]


def deaths(
    conn: psycopg.Connection[dict[str, Any]], broadcast_id: int | None = None, limit: int = 10
) -> Deaths:
    """How many worker deaths (that held `broadcast_id`'s jobs, if given), and the latest."""
    params = {"broadcast_id": broadcast_id, "limit": limit}
    head = conn.execute(DEATH_COUNT, params).fetchone()
    recent = conn.execute(DEATHS, params).fetchall()
    assert head is not None
    return Deaths(
        count=int(head["n"]),
        last_at=head["last_at"],
        last_reason=recent[0]["reason"] if recent else None,
        recent=recent,
    )
