"""How long a commit takes at the least: the floor of each session's wait at its final dot.

    .venv/bin/python bench/commit_latency.py                  # 3,000 round trips each
    .venv/bin/python bench/commit_latency.py --count 10000 --parallel 1,2,4

A session's final dot waits for the commit of its previous outcome (shared DESIGN.md,
invariant 3), so a message takes a session at least one commit more than the plain loop of
`bench/speed.py` spends on it. This times that commit with nothing else running: from asyncio on
uvloop, as the worker does, autocommit connections each updating one row of a scratch table
(one WAL flush a statement), one at a time on each connection, with 1, 2... connections at once
(a worker process has one recorder; each process adds one). `SELECT 1` is the round trip alone.
Uses SENDDOCK_DATABASE_URL if set, else an embedded Postgres; the scratch table is dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import uvloop
from psycopg import AsyncConnection
from rich.console import Console
from rich.table import Table

from senddock.db.embedded import given_or_embedded

# A scratch table of its own, made and dropped by this script (the names are written out: no SQL
# is built from strings).
DROP = "DROP TABLE IF EXISTS senddock_commit_latency"
CREATE = "CREATE TABLE senddock_commit_latency (id int PRIMARY KEY, n bigint NOT NULL)"
FILL = "INSERT INTO senddock_commit_latency SELECT g, 0 FROM generate_series(1, %(most)s) g"
UPDATE = "UPDATE senddock_commit_latency SET n = n + 1 WHERE id = %(row)s"


async def timed(
    conn: AsyncConnection[tuple[int, ...]], query: str, row: int, n: int
) -> list[float]:
    """Seconds of each of `n` executions of `query` for `row`, one after another."""
    took = []
    for _ in range(n):
        t = time.perf_counter()
        await conn.execute(query, {"row": row})
        took.append(time.perf_counter() - t)
    return took


async def measure(url: str, count: int, parallel: list[int]) -> list[tuple[str, list[float]]]:
    most = max(parallel)
    conns = [await AsyncConnection.connect(url, autocommit=True) for _ in range(most)]
    try:
        await conns[0].execute(DROP)
        await conns[0].execute(CREATE)
        await conns[0].execute(FILL, {"most": most})
        results = [
            ("SELECT 1 (the round trip, no commit)", await timed(conns[0], "SELECT 1", 1, count))
        ]
        for k in parallel:
            runs = await asyncio.gather(*(timed(conns[i], UPDATE, i + 1, count) for i in range(k)))
            label = f"one-row UPDATE, committed: {k} connection{'s' if k > 1 else ''} at once"
            results.append((label, [t for run in runs for t in run]))
        await conns[0].execute(DROP)
        return results
    finally:
        for conn in conns:
            await conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=3000, help="round trips per connection")
    parser.add_argument(
        "--parallel",
        default="1,2",
        help="comma-separated numbers of connections committing at once",
    )
    args = parser.parse_args()
    parallel = sorted({int(p) for p in args.parallel.split(",")})
    if not parallel or parallel[0] < 1:
        parser.error("--parallel takes positive numbers, e.g. 1,2")
    with given_or_embedded("sdcommit") as url:
        results = uvloop.run(measure(url, args.count, parallel))
    table = Table(title=f"Commit latency, µs ({args.count:,} round trips a connection)")
    for column in ("statement", "median", "p10", "p90"):
        table.add_column(column, justify="left" if column == "statement" else "right")
    for label, took in results:
        took.sort()
        us = [round(1e6 * x) for x in (statistics.median(took), took[len(took) // 10])]
        us.append(round(1e6 * took[len(took) * 9 // 10]))
        table.add_row(label, *(f"{u:,}" for u in us))
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
