"""Why migration 0024 adds no index on broadcast_jobs (subscriber_id): what one would cost
the enqueue and buy the subscriber page's history.

    .venv/bin/python bench/subscriber_page.py            # 100,000 recipients, 3 rounds
    .venv/bin/python bench/subscriber_page.py 20000 --rounds 2 --broadcasts 100

Enqueue: each round enqueues one broadcast to N subscribers twice, with such an index and
without it (order alternating), as bench/enqueue.py does. History: B broadcasts to 1,000
subscribers, then the dashboard's statement (web/queries.py subscriber_history) for the first
subscriber, with and without the index; without it, Postgres 18 reads broadcast_jobs_once
(broadcast_id, subscriber_id) by skip scan, one descent per broadcast kept (retention bounds
them). Prints medians and the ratios within this run. Uses SENDDOCK_DATABASE_URL if set, else
an embedded Postgres in a temp folder.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import psycopg
from rich.console import Console
from rich.table import Table

from enqueue import JOIN, SEED, _campaign, enqueue_rest
from senddock.audience.lists import ensure_list
from senddock.campaigns import broadcast
from senddock.campaigns.broadcast import CHUNK
from senddock.db import connect, migrate
from senddock.db.embedded import given_or_embedded
from senddock.web import queries

Conn = psycopg.Connection[dict[str, object]]

DROP = "DROP INDEX IF EXISTS broadcast_jobs_subscriber"
MAKE = "CREATE INDEX IF NOT EXISTS broadcast_jobs_subscriber ON broadcast_jobs (subscriber_id, id)"


def _enqueue(url: str, conn: Conn, list_name: str, name: str) -> float:
    """Seconds to enqueue one broadcast of `list_name` to the end (every chunk committed)."""
    cid = _campaign(conn, list_name, name)
    t0 = time.perf_counter()
    bid, _, _ = broadcast(conn, cid)
    enqueue_rest(url, bid, CHUNK)
    return time.perf_counter() - t0


def _seed(conn: Conn, n: int, tag: str) -> None:
    list_id = ensure_list(conn, tag)
    with conn.transaction():
        conn.execute(SEED, {"n": n, "tag": tag})
        conn.execute(JOIN, {"list": list_id, "tag": tag})
    conn.execute("VACUUM ANALYZE subscribers")
    conn.execute("VACUUM ANALYZE list_memberships")


def run(url: str, n: int, rounds: int, broadcasts: int) -> dict[str, float]:
    """Medians: enqueue seconds and history page ms, with and without the index."""
    times: dict[str, list[float]] = {"with": [], "without": [], "read with": [], "read without": []}
    with connect(url) as conn:
        migrate(conn)
        _seed(conn, n, "big")
        for i in range(rounds):
            for indexed in (True, False) if i % 2 == 0 else (False, True):
                conn.execute(MAKE if indexed else DROP)
                conn.execute("CHECKPOINT")
                took = _enqueue(url, conn, "big", f"r{i}-{indexed}")
                times["with" if indexed else "without"].append(took)
        conn.execute("TRUNCATE broadcast_jobs, broadcast_counts, broadcasts, campaigns CASCADE")
        _seed(conn, 1_000, "small")
        for i in range(broadcasts):
            _enqueue(url, conn, "small", f"h{i}")
        conn.execute("VACUUM ANALYZE broadcast_jobs")
        first = conn.execute(
            "SELECT min(id) AS id FROM subscribers WHERE email LIKE '%%@benchsmall.example'"
        ).fetchone()
        assert first is not None
        sid = int(str(first["id"]))
        for indexed in (True, False, True, False):
            conn.execute(MAKE if indexed else DROP)
            conn.execute("ANALYZE broadcast_jobs")
            t0 = time.perf_counter()
            for _ in range(50):
                queries.subscriber_history(conn, sid, 51, 0)
            read = (time.perf_counter() - t0) / 50 * 1000
            times["read with" if indexed else "read without"].append(read)
        conn.execute(DROP)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("n", nargs="?", type=int, default=100_000, help="recipients")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--broadcasts", type=int, default=300, help="kept, for the history")
    args = parser.parse_args()
    with given_or_embedded("sdbench") as url:
        med = run(url, args.n, args.rounds, args.broadcasts)
    table = Table(
        title=f"An index on broadcast_jobs (subscriber_id, id): enqueue of {args.n:,} jobs"
        f" ({args.rounds} rounds); history page among {args.broadcasts} broadcasts"
    )
    for col in ("", "with the index", "without", "ratio"):
        table.add_column(col, justify="right")
    table.add_row(
        "enqueue s",
        f"{med['with']:.2f}",
        f"{med['without']:.2f}",
        f"{med['with'] / med['without']:.2f}",
    )
    table.add_row(
        "history page ms",
        f"{med['read with']:.2f}",
        f"{med['read without']:.2f}",
        f"{med['read with'] / med['read without']:.3f}",
    )
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
