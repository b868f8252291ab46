"""Claim throughput on an empty queue table and on one holding millions of finished rows.

    .venv/bin/python bench/table_health.py                  # 10,000,000 finished rows
    .venv/bin/python bench/table_health.py --rows 1000000 --jobs 20000

Runs the real queue SQL (senddock/queue/jobs.py `claim`, then `record_many` of each job alone as
sent: one commit per outcome, the worst case, since a worker groups them) from `--sessions`
concurrent connections
until `--jobs` jobs are drained (best of two, after a warm-up drain): first with no finished
rows in `broadcast_jobs` but those of the drains, then after adding `--rows` finished (`sent`)
rows with generate_series SQL (500 past broadcasts to the same subscribers, vacuumed as
autovacuum would). Prints both rates and their ratio (target 5 of
issue 6: within 10 %). Uses SENDDOCK_DATABASE_URL if set, else an embedded Postgres.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from rich.console import Console
from rich.table import Table

from senddock import queue
from senddock.audience.lists import ensure_list
from senddock.campaigns import broadcast, create_campaign
from senddock.campaigns.broadcast import enqueue_all
from senddock.db import connect, migrate
from senddock.db.embedded import given_or_embedded
from senddock.delivery.outcome import Reply, Transition

OWNER = 1
PAST_BROADCASTS = 500
SEED = """
INSERT INTO subscribers (email, name)
SELECT 'h' || g || '@health.example', 'H ' || g FROM generate_series(1, %(n)s::int) g
"""
JOIN = "INSERT INTO list_memberships (list_id, subscriber_id) SELECT %(list)s, id FROM subscribers"
# Past broadcasts, finished long ago, and their jobs: every one sent.
PAST = """
WITH c AS (
    INSERT INTO campaigns (name, subject, from_addr, text_body, status)
    SELECT 'past ' || g, 'S', 'bench@example.org', 'T', 'sent'
    FROM generate_series(1, %(k)s::int) g
    RETURNING id
)
INSERT INTO broadcasts (campaign_id, status, total, finished_at, message_token, message_domain)
SELECT id, 'finished', 0, now() - interval '1 day', 'past', 'example.org' FROM c
RETURNING id
"""
FINISHED_JOBS = """
INSERT INTO broadcast_jobs (broadcast_id, subscriber_id, email, status, attempts, owner,
                            claimed_at, sent_at, message_id, last_code, last_reply, last_stage)
SELECT b, s.id, s.email, 'sent', 1, %(owner)s, now(), now(),
       '<sd.' || b || '.' || s.id || '.past@example.org>', 250, '250 2.0.0 OK', 'data'
FROM unnest(%(bids)s::bigint[]) b, (SELECT id, email FROM subscribers ORDER BY id LIMIT %(per)s) s
"""


async def _session(url: str, batch: int, done: list[int]) -> None:
    ok = Transition("sent")
    reply = Reply("data", 250, "2.0.0 OK")
    async with await AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
        while True:
            jobs = await queue.claim(conn, OWNER, batch)
            if not jobs:
                return
            for job in jobs:
                outcome = [queue.Outcome(job, ok, reply)]  # one commit per outcome, as before
                assert await queue.record_many(conn, OWNER, outcome) == {job.id}
            done[0] += len(jobs)


def drain_rate(url: str, list_name: str, jobs: int, sessions: int, batch: int) -> float:
    """Enqueue a broadcast of `jobs` and drain it with claim + record; jobs per second."""
    with connect(url) as conn:
        cid = create_campaign(
            conn,
            name="live",
            list_name=list_name,
            subject="S",
            from_addr="bench@example.org",
            text_body="T",
        )
        bid, _, _ = broadcast(conn, cid)
        enqueue_all(conn, bid)
        conn.execute("ANALYZE broadcast_jobs")
        conn.execute("CHECKPOINT")  # each drain starts from the same state of the WAL
    done = [0]

    async def run() -> None:
        await asyncio.gather(*(_session(url, batch, done) for _ in range(sessions)))

    t0 = time.perf_counter()
    asyncio.run(run())
    took = time.perf_counter() - t0
    assert done[0] == jobs, (done[0], jobs)
    return jobs / took


def add_finished(url: str, list_id: int, rows: int, jobs: int) -> float:
    """Add `rows` finished jobs (PAST_BROADCASTS broadcasts); seconds it took, vacuum included."""
    per = max(1, min(jobs, rows // PAST_BROADCASTS))
    k = max(1, rows // per)
    t0 = time.perf_counter()
    with connect(url) as conn:
        made = conn.execute(PAST, {"list": list_id, "k": k}).fetchall()
        bids = [int(str(r["id"])) for r in made]
        for i in range(0, len(bids), 20):
            conn.execute(FINISHED_JOBS, {"owner": OWNER, "bids": bids[i : i + 20], "per": per})
        conn.execute("VACUUM ANALYZE broadcast_jobs")
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="finished rows to add")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs drained per measurement")
    parser.add_argument("--sessions", type=int, default=5, help="concurrent claimers")
    parser.add_argument("--batch", type=int, default=10, help="jobs per claim")
    args = parser.parse_args()
    with given_or_embedded("sdhealth") as url:
        with connect(url) as conn:
            migrate(conn)
            list_id = ensure_list(conn, f"health-{time.time_ns()}")
            name = conn.execute("SELECT name FROM lists WHERE id = %s", (list_id,)).fetchone()
            assert name is not None
            with conn.transaction():
                conn.execute(SEED, {"n": args.jobs})
                conn.execute(JOIN, {"list": list_id})
            conn.execute("VACUUM ANALYZE")
        list_name = str(name["name"])
        drain_rate(url, list_name, args.jobs, args.sessions, args.batch)  # warm-up, not counted
        empty = max(drain_rate(url, list_name, args.jobs, args.sessions, args.batch) for _ in "ab")
        seeded = add_finished(url, list_id, args.rows, args.jobs)
        with connect(url) as conn:
            row = conn.execute("SELECT count(*) AS n FROM broadcast_jobs").fetchone()
            held = int(str(row["n"])) if row else 0
        full = max(drain_rate(url, list_name, args.jobs, args.sessions, args.batch) for _ in "ab")
    table = Table(title="Claim + record throughput (real queue SQL)")
    for col in ("rows in broadcast_jobs", "jobs/s", "ratio to empty"):
        table.add_column(col, justify="right")
    table.add_row(f"{3 * args.jobs:,} (the live broadcasts only)", f"{empty:,.0f}", "1.00")
    table.add_row(f"{held:,}", f"{full:,.0f}", f"{full / empty:.2f}")
    Console().print(table)
    print(
        f"{args.sessions} sessions, claims of {args.batch}; best of 2 drains each (after a"
        f" warm-up); finished rows added in {seeded:.0f} s (vacuum included)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
