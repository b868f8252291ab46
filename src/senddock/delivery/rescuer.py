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
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import psycopg
from psycopg import AsyncConnection

from senddock import queue
from senddock.db import sql
from senddock.delivery import dotlog
from senddock.delivery.maintainer import Service
from senddock.delivery.processes import process_start
from senddock.delivery.state import Lease

AsyncConn = AsyncConnection[dict[str, Any]]

LOCK_CLASS = 0x5344  # first key of every worker's advisory lock; the second is the worker id
QUERIES = sql.load(__package__, "rescuer.sql")
log = logging.getLogger("senddock.worker")


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
        return cls(socket.gethostname(), dotlog.boot_id(), pid, process_start(pid) or "")


def process_alive(pid: int, started: str) -> bool:
    """Is the process that registered as (pid, started) still running here?"""
    now = process_start(pid)
    return now is not None and (not started or now == started)


async def register(
    conn: AsyncConn, me: Identity, concurrency: int, dot_log: Path | None = None
) -> int:
    """Insert this worker's row and take its lock on `conn` (which must stay open)."""
    cur = await conn.execute(
        QUERIES["register"],
        {
            "host": me.host,
            "boot_id": me.boot_id,
            "pid": me.pid,
            "pid_started": me.pid_started,
            "concurrency": concurrency,
            "dot_log": None if dot_log is None else str(dot_log),
        },
    )
    row = await cur.fetchone()
    assert row is not None
    worker_id = int(row["id"])
    await conn.execute(QUERIES["lock"], {"cls": LOCK_CLASS, "id": worker_id})
    return worker_id


async def relock(conn: AsyncConn, worker_id: int) -> None:
    """Take this worker's lock again on a new heartbeat connection."""
    await conn.execute(QUERIES["lock"], {"cls": LOCK_CLASS, "id": worker_id})


async def heartbeat(conn: AsyncConn, worker_id: int) -> bool:
    """Refresh the heartbeat; False when this worker was declared dead."""
    cur = await conn.execute(QUERIES["heartbeat"], {"id": worker_id})
    return await cur.fetchone() is not None


async def mark_stopping(conn: AsyncConn, worker_id: int) -> None:
    await conn.execute(QUERIES["stopping"], {"id": worker_id})


async def deregister(conn: AsyncConn, worker_id: int, reason: str | None = None) -> None:
    """Remove this worker's row; with a `reason`, as a death, written down with what it held."""
    if reason is None:
        await conn.execute(QUERIES["deregister"], {"id": worker_id})
    else:
        await conn.execute(QUERIES["last_words"], {"id": worker_id, "reason": reason[:1000]})


def note_exit(conn: psycopg.Connection[Any], ident: Identity, reason: str) -> None:
    """The supervisor's account of how child `ident` ended (exit code, signal, watchdog).

    A peer on this host may be burying the child at this moment: then the statement finds
    neither its row (deleted) nor its death (not yet visible to it), and a moment later the
    death is there. Tried again a few times, briefly; a child that died before it registered
    has neither, and its reason goes to the supervisor's log only."""
    params = {
        "host": ident.host,
        "pid": ident.pid,
        "pid_started": ident.pid_started,
        "reason": reason[:1000],
    }
    for _ in range(3):
        row = conn.execute(QUERIES["exit_reason"], params).fetchone()
        noted = row[0] if isinstance(row, tuple) else (row or {}).get("noted")
        if noted:
            return
        time.sleep(0.1)


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
    retry; the dot logs of the dead that ran on this host say which dots did not go
    (delivery/dotlog.py), so their jobs go back to retry instead.
    """
    cur = await conn.execute(QUERIES["peers"], {"cls": LOCK_CLASS, "me": me})
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
    logs: list[dotlog.Read] = []
    async with conn.transaction():
        buried: list[int] = []
        logged: dict[int, frozenset[tuple[int, int]]] = {}
        if known_dead or lapsed:
            cur = await conn.execute(
                QUERIES["bury"], {"known_dead": known_dead, "lapsed": lapsed, "lease": lease}
            )
            for r in await cur.fetchall():
                buried.append(int(r["id"]))
                # Read only once buried by this transaction: no other rescuer acts on it now.
                read = _dot_log(r, ident)
                if read is not None:
                    logs.append(read)
                    logged[int(r["id"])] = read.dots
                    log.info(
                        "worker %s's dot log read: its senders were at the final dots of %d jobs",
                        r["id"],
                        len(read.dots),
                    )
        cur = await conn.execute(QUERIES["unknown_owners"])
        owners = [int(r["id"]) for r in await cur.fetchall() if r["id"] is not None]
        n = await queue.rescue(conn, sorted(set(buried) | set(owners)), hold=hold, logged=logged)
    for read in logs:
        dotlog.remove(read.path)
    return n


def _dot_log(row: dict[str, Any], ident: Identity) -> dotlog.Read | None:
    """The dot log of a worker just buried, if it ran on this host in this boot and its log
    can be trusted (delivery/dotlog.py)."""
    if row["dot_log"] is None or row["host"] != ident.host or row["boot_id"] != ident.boot_id:
        return None
    return dotlog.read_dead(str(row["dot_log"]), str(row["boot_id"]), int(row["pid"]))


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


Health = Literal["live", "late", "stopping", "dead"]


@dataclass(frozen=True)
class WorkerView:
    """A registered worker as `senddock workers`, the API and the workers page show it: its
    heartbeat age and health judged on the database clock (`list` in rescuer.sql)."""

    id: int
    host: str
    pid: int
    concurrency: int
    started_at: datetime
    heartbeat_at: datetime
    stopping: bool
    heartbeat_age: float  # seconds since its heartbeat (senddock_heartbeat_age)
    # live; late past half the lease; stopping; dead past the lease (buried at a live peer's
    # next look, which rescues what it holds).
    health: Health
    holding: int  # jobs it holds (status sending)


def list_workers(conn: psycopg.Connection[dict[str, Any]], lease: float) -> list[WorkerView]:
    """Registered workers with heartbeat age (database clock), health and the jobs each holds."""
    return [WorkerView(**r) for r in conn.execute(QUERIES["list"], {"lease": lease}).fetchall()]


@dataclass(frozen=True)
class Death:
    """One worker process found dead (worker_deaths): which, where, when it last beat, when it
    was found, why, and the jobs (and broadcasts) it held."""

    id: int
    worker_id: int
    host: str
    pid: int
    started_at: datetime
    last_heartbeat: datetime
    found_at: datetime
    reason: str
    jobs_held: int
    broadcast_ids: tuple[int, ...]


@dataclass(frozen=True)
class Deaths:
    """Worker processes found dead (all of them, or those that held a broadcast's jobs)."""

    count: int
    last_at: datetime | None
    last_reason: str | None
    recent: tuple[Death, ...]  # the latest, newest first


def deaths(
    conn: psycopg.Connection[dict[str, Any]], broadcast_id: int | None = None, limit: int = 10
) -> Deaths:
    """How many worker deaths (that held `broadcast_id`'s jobs, if given), and the latest."""
    params = {"broadcast_id": broadcast_id, "limit": limit}
    head = conn.execute(QUERIES["death_count"], params).fetchone()
    rows = conn.execute(QUERIES["deaths"], params).fetchall()
    assert head is not None
    recent = tuple(Death(**{**r, "broadcast_ids": tuple(r["broadcast_ids"])}) for r in rows)
    return Deaths(
        count=int(head["n"]),
        last_at=head["last_at"],
        last_reason=recent[0].reason if recent else None,
        recent=recent,
    )
