"""The memory of `senddock worker` at defaults: RSS and PSS of every process of its tree.

    .venv/bin/python bench/worker_memory.py                 # `python -m senddock worker`
    .venv/bin/python bench/worker_memory.py --send 2000     # after sending 2,000 messages

Starts the command against an embedded Postgres (or SENDDOCK_DATABASE_URL) and an SMTP catcher,
waits until every worker process has registered (idle and ready; with `--send`, until the
broadcast is sent), lets it settle, then reads /proc/PID/smaps_rollup of the parent and of each
child: RSS counts a page shared with another process in each of them, PSS divides it among them,
so the PSS column adds up to what the tree costs the machine.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

import speed
from senddock.db import connect, migrate
from senddock.db.embedded import given_or_embedded
from senddock.testing import Catcher

SRC = str(Path(__file__).resolve().parent.parent / "src")
FIELDS = ("Rss", "Pss", "Private_Clean", "Private_Dirty", "Shared_Clean", "Shared_Dirty")


def smaps(pid: int) -> dict[str, int]:
    """The kB figures of /proc/PID/smaps_rollup."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1])
    return out


def children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            kids += [int(p) for p in f.read().split()]
    return sorted(kids)


def registered(url: str) -> int:
    with connect(url) as conn:
        row = conn.execute("SELECT count(*) AS n FROM workers").fetchone()
    return int(str(row["n"])) if row else 0


def enqueue(url: str, count: int) -> None:
    """`count` subscribers and a campaign to them, sent with `senddock campaign send`."""
    with connect(url) as conn:
        name = speed.seed_audience(conn, count, "memory")
        cid = speed.new_campaign(conn, name, "memory")
    speed.cli_send(_env(url, "smtp://127.0.0.1:1"), cid)


def unsent(url: str) -> int:
    with connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) AS n FROM broadcast_jobs WHERE status NOT IN ('sent', 'failed')"
        ).fetchone()
    return int(str(row["n"])) if row else 0


def _env(url: str, smtp: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SENDDOCK_DATABASE_URL=url,
        SENDDOCK_SMTP_URL=smtp,
        SENDDOCK_ALLOW_RESERVED_DOMAINS="1",
        PYTHONPATH=SRC + os.pathsep + env.get("PYTHONPATH", ""),
    )
    return env


def measure(
    url: str, send: int, settle: float, processes: int | None
) -> list[tuple[str, int, dict[str, int]]]:
    with Catcher() as catcher:
        if send:
            enqueue(url, send)
        argv = [sys.executable, "-m", "senddock", "worker"]
        if processes is not None:
            argv += ["--processes", str(processes)]
        proc = subprocess.Popen(argv, env=_env(url, catcher.url), stdout=subprocess.DEVNULL)
        try:
            expected = processes or min(len(os.sched_getaffinity(0)), 4)
            deadline = time.monotonic() + 60
            while registered(url) < expected or (send and unsent(url)):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the worker did not become ready (exit {proc.poll()})")
                time.sleep(0.2)
            time.sleep(settle)
            rows = [("supervisor", proc.pid, smaps(proc.pid))]
            rows += [("worker", kid, smaps(kid)) for kid in children(proc.pid)]
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--send", type=int, default=0, help="send this many messages first")
    parser.add_argument("--processes", type=int, help="--processes (default: none given)")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds idle before reading")
    args = parser.parse_args()
    with given_or_embedded("sdmem") as url:
        with connect(url) as conn:
            migrate(conn)
            conn.execute("DELETE FROM workers")
        rows = measure(url, args.send, args.settle, args.processes)
    what = "python -m senddock worker"
    table = Table(title=f"{what} (defaults), {args.send} sent; kB")
    table.add_column("process")
    table.add_column("pid", justify="right")
    for name in FIELDS:
        table.add_column(name, justify="right")
    for role, pid, fig in rows:
        table.add_row(role, str(pid), *(f"{fig.get(k, 0):,}" for k in FIELDS))
    table.add_row("total", "", *(f"{sum(fig.get(k, 0) for _, _, fig in rows):,}" for k in FIELDS))
    Console().print(table)


if __name__ == "__main__":
    main()
