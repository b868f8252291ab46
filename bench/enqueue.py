"""How long a broadcast takes to enqueue, and how long `campaign send` takes to return.

    .venv/bin/python bench/enqueue.py                 # 10,000 and 100,000 recipients
    .venv/bin/python bench/enqueue.py --million       # and 1,000,000
    .venv/bin/python bench/enqueue.py 50000 --chunk 20000

For each size N, subscribers are seeded with generate_series SQL and vacuumed (a real list is
old: hint bits set, pages all-visible). Then:
  - `campaign send` ms: the wall time of a real `senddock campaign send` process minus that of
    `python -c "import senddock.cli"` (interpreter start and imports), median of 5 each; the
    campaign is then cancelled;
  - broadcast() ms: how long the in-process call (what the API does) takes to return;
  - enqueue seconds: a second campaign, in process: broadcast() (the first chunk) plus every
    further chunk back to back from PARTS connections at once, as a worker's PARTS enqueue
    tasks run them, until the last is committed.
Uses SENDDOCK_DATABASE_URL if set, else an embedded Postgres in a temp folder. Prints a table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

from senddock.audience.lists import ensure_list
from senddock.campaigns import broadcast, cancel, create_campaign
from senddock.campaigns.broadcast import CHUNK, PARTS, enqueue_all
from senddock.db import connect, migrate
from senddock.db.embedded import given_or_embedded

SEED = """
INSERT INTO subscribers (email, name)
SELECT 'user' || g || '@bench' || %(tag)s::text || '.example', 'User ' || g
FROM generate_series(1, %(n)s::int) g
"""
JOIN = """
INSERT INTO list_memberships (list_id, subscriber_id)
SELECT %(list)s, id FROM subscribers WHERE email LIKE '%%@bench' || %(tag)s::text || '.example'
"""


def _seconds(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def _campaign(conn: psycopg.Connection[dict[str, Any]], list_name: str, name: str) -> int:
    return create_campaign(
        conn,
        name=name,
        list_name=list_name,
        subject="Hi {{ subscriber.name }}",
        from_addr="bench@example.org",
        text_body="Hello {{ subscriber.name }}\n",
    )


def enqueue_rest(url: str, bid: int, chunk: int) -> int:
    """What a worker's PARTS enqueue tasks do: chunks from PARTS connections at once; jobs."""
    made = [0] * PARTS

    def one(i: int) -> None:
        with connect(url) as conn:
            made[i] = enqueue_all(conn, bid, chunk)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(PARTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(made)


def measure(url: str, sizes: list[int], chunk: int) -> list[tuple[int, float, float, float, float]]:
    """(recipients, enqueue seconds, jobs/s, broadcast() ms, `campaign send` ms) per size."""
    env = {**os.environ, "SENDDOCK_DATABASE_URL": url}
    cli = [sys.executable, "-m", "senddock"]
    rows = []
    with connect(url) as conn:
        migrate(conn)
        for n in sizes:
            tag = f"{n}x{time.time_ns()}"
            list_name = f"bench-{tag}"
            list_id = ensure_list(conn, list_name)
            with conn.transaction():
                conn.execute(SEED, {"n": n, "tag": tag})
                conn.execute(JOIN, {"list": list_id, "tag": tag})
            conn.execute("VACUUM ANALYZE subscribers")
            conn.execute("VACUUM ANALYZE list_memberships")

            imports = [sys.executable, "-c", "import senddock.cli"]
            base = statistics.median(_seconds(imports, env) for _ in range(5))
            sends = []
            for i in range(5):
                cid = _campaign(conn, list_name, f"cli-{i}")
                sends.append(_seconds([*cli, "campaign", "send", str(cid)], env))
                cancel(conn, cid)  # its enqueue stops here
            send_ms = max(0.0, statistics.median(sends) - base) * 1000

            conn.execute("CHECKPOINT")
            cid = _campaign(conn, list_name, "bench")
            t0 = time.perf_counter()
            bid, first, _ = broadcast(conn, cid)
            returned_ms = (time.perf_counter() - t0) * 1000
            total = first + enqueue_rest(url, bid, chunk)
            took = time.perf_counter() - t0
            assert total == n, (total, n)
            rows.append((n, took, n / took, returned_ms, send_ms))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("sizes", nargs="*", type=int, help="recipients (default 10000 100000)")
    parser.add_argument("--million", action="store_true", help="also 1,000,000 recipients")
    parser.add_argument("--chunk", type=int, default=CHUNK, help="jobs per enqueue chunk")
    args = parser.parse_args()
    sizes = args.sizes or [10_000, 100_000]
    if args.million:
        sizes.append(1_000_000)
    with given_or_embedded("sdbench") as url:
        rows = measure(url, sizes, args.chunk)
    table = Table(
        title=f"Broadcast enqueue: chunks of {args.chunk:,} jobs, one transaction each,"
        f" {PARTS} at a time"
    )
    cols = ("recipients", "enqueue seconds", "jobs/s", "broadcast() ms", "campaign send ms")
    for col in cols:
        table.add_column(col, justify="right")
    for n, took, rate, returned_ms, send_ms in rows:
        table.add_row(
            f"{n:,}", f"{took:.2f}", f"{rate:,.0f}", f"{returned_ms:.0f}", f"{send_ms:.0f}"
        )
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
