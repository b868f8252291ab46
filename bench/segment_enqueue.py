"""Enqueue time of a broadcast narrowed by a segment on a JSON attribute, against none.

    .venv/bin/python bench/segment_enqueue.py                       # 1,000,000 recipients
    .venv/bin/python bench/segment_enqueue.py --subscribers 200000

N subscribers are seeded with generate_series SQL, each with attributes {"city": one of ten,
"plan": one of four}, all on one list, and vacuumed. Then, `--rounds` times in turn, for each
audience: a campaign is created and sent in process (broadcast(), then every further chunk
from PARTS connections at once, as a worker's enqueue tasks run them) until its last chunk is
committed; its jobs are then truncated so every run starts from the same table. Audiences:
  - no filter;
  - `exists attributes.city` (everyone matches: what evaluating the filter costs);
  - `attributes.city = "London"` (a tenth match);
  - `attributes.plan in ["pro", "team"]` (half match).
Also the count preview (`campaign preview ID`) of the London filter. Prints the median of the
rounds and each against no filter. Uses SENDDOCK_DATABASE_URL if set, else an embedded Postgres.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

from enqueue import enqueue_rest  # bench/enqueue.py: what a worker's enqueue tasks do
from senddock.audience.lists import ensure_list
from senddock.campaigns import broadcast, create_campaign
from senddock.campaigns.audience import preview_count
from senddock.db import connect, migrate
from senddock.db.embedded import given_or_embedded
from senddock.queue import CHUNK, PARTS

SEED = """
INSERT INTO subscribers (email, name, attributes)
SELECT 'user' || g || '@seg.example', 'User ' || g,
       jsonb_build_object(
           'city', (ARRAY['London','Paris','Zürich','Oslo','Lima','Pune','Kyiv','Accra',
                          'Quito','Hanoi'])[1 + g %% 10],
           'plan', (ARRAY['free','pro','team','trial'])[1 + (g / 10) %% 4])
FROM generate_series(1, %(n)s::int) g
"""
JOIN = "INSERT INTO list_memberships (list_id, subscriber_id) SELECT %(list)s, id FROM subscribers"
EMPTY_JOBS = "TRUNCATE broadcast_jobs, broadcast_counts"

AUDIENCES: list[tuple[str, str | None]] = [
    ("no filter", None),
    ("everyone matches", "exists attributes.city"),
    ("a tenth", 'attributes.city = "London"'),
    ("half", 'attributes.plan in ["pro", "team"]'),
]

Conn = psycopg.Connection[dict[str, Any]]


def _campaign(conn: Conn, name: str, audience_filter: str | None) -> int:
    return create_campaign(
        conn,
        name=name,
        list_name="seg-bench",
        subject="Hi {{ subscriber.name }}",
        from_addr="bench@example.org",
        text_body="Hello {{ subscriber.name }}\n",
        audience_filter=audience_filter,
    )


def measure(
    url: str, n: int, rounds: int, chunk: int
) -> tuple[dict[str, list[float]], dict[str, int], float]:
    """Seconds per round and jobs, by audience; and the count preview's seconds."""
    took: dict[str, list[float]] = {label: [] for label, _ in AUDIENCES}
    jobs: dict[str, int] = {}
    with connect(url) as conn:
        migrate(conn)
        list_id = ensure_list(conn, "seg-bench")
        with conn.transaction():
            conn.execute(SEED, {"n": n})
            conn.execute(JOIN, {"list": list_id})
        conn.execute("VACUUM ANALYZE subscribers")
        conn.execute("VACUUM ANALYZE list_memberships")
        for r in range(rounds):
            for label, text in AUDIENCES:
                conn.execute(EMPTY_JOBS)
                conn.execute("CHECKPOINT")
                cid = _campaign(conn, f"{label} {r}", text)
                t0 = time.perf_counter()
                bid, first, _ = broadcast(conn, cid)
                total = first + enqueue_rest(url, bid, chunk)
                took[label].append(time.perf_counter() - t0)
                jobs[label] = total
                print(
                    f"round {r + 1}, {label}: {total:,} jobs in {took[label][-1]:.2f} s", flush=True
                )
        cid = _campaign(conn, "preview", AUDIENCES[2][1])
        t0 = time.perf_counter()
        preview_count(conn, cid)
        preview = time.perf_counter() - t0
        conn.execute(EMPTY_JOBS)
    return took, jobs, preview


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--subscribers", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=CHUNK, help="jobs per enqueue chunk")
    args = parser.parse_args()
    with given_or_embedded("sdsegbench") as url:
        took, jobs, preview = measure(url, args.subscribers, args.rounds, args.chunk)
    base = statistics.median(took["no filter"])
    table = Table(
        title=f"Enqueue of {args.subscribers:,} recipients narrowed by a JSON attribute"
        f" (chunks of {args.chunk:,}, {PARTS} at a time, median of {args.rounds})"
    )
    for col in ("audience", "filter", "jobs", "enqueue s", "vs no filter", "µs per recipient"):
        table.add_column(col, justify="right")
    for label, text in AUDIENCES:
        t = statistics.median(took[label])
        table.add_row(
            label,
            text or "-",
            f"{jobs[label]:,}",
            f"{t:.2f}",
            f"{t / base:.2f}",
            f"{t / args.subscribers * 1e6:.2f}",
        )
    Console(width=120).print(table)
    Console(width=120).print(f"count preview of {AUDIENCES[2][1]}: {preview * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
