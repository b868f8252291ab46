"""Count latency: does reading counts grow with the size of the broadcasts? (issue 20, item 3)

    .venv/bin/python bench/count_latency.py        # 20 x 10,000 against 20 x 1,000,000
    .venv/bin/python bench/count_latency.py --big 200000 --runs 10

For each size, a fresh set of --campaigns campaigns with a broadcast of that many jobs each,
inserted set-based with generate_series (not through enqueue, to keep it to minutes): even
campaigns finished (99 % sent, 1 % bounced), odd ones half way (half sent, half pending). Then,
the median of --runs of: the dashboard's campaign list (`GET /`, logged in) and the API's
(`GET /api/v1/campaigns`) from a real `senddock serve --no-workers`, and `campaign status` of
one campaign (campaigns.status in this process: the CLI adds its interpreter start, ~0.5 s,
to each). For reference, main's statements before the one count (the API list's per-campaign
count of sent and failed jobs, and `campaign status`'s COUNTS) on the same rows.

Printed: one table, a row per measure, a column per size, and big/small.

Measured 2026-12-02, this 2-core shared machine, embedded Postgres 18, default arguments
(20 campaigns, 10,000 against 1,000,000 jobs each, median of 20; seeding 20,000,000 jobs took
103 s), in ms: dashboard list 8.2 / 8.9 (1.09x), API list 5.1 / 5.5 (1.08x), campaign status
of a finished campaign 0.8 / 0.6, of a half-way one 0.5 / 0.5; main's API list statement
21.2 / 3,437 (162x), main's status COUNTS 1.3 / 88.5 (69x).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from senddock.campaigns import status
from senddock.db import connect
from senddock.web import auth
from speed import Conn, database, env_for, free_port

EMAIL, PASSWORD = "bench@example.org", "correct horse battery staple"

CAMPAIGN = """
INSERT INTO campaigns (name, list_id, subject, from_addr, text_body, status)
VALUES (%(name)s, %(list)s, 'Bench', 'bench@example.org', 'Hi', %(status)s) RETURNING id
"""
BROADCAST = """
INSERT INTO broadcasts (campaign_id, total, status, finished_at, message_token, message_domain)
VALUES (%(c)s, %(n)s, %(status)s, CASE WHEN %(status)s = 'finished' THEN now() END, 'bench',
        'bench.example') RETURNING id
"""
# Every job at once: 1 in 100 bounced (with a reply, the last problem), the rest sent, or (in a
# half-way broadcast) the second half still pending.
JOBS = """
INSERT INTO broadcast_jobs (broadcast_id, subscriber_id, email, status, failure, attempts,
                            sent_at, last_code, last_reply, last_stage, message_id)
SELECT %(b)s, g, 'b' || g || '@bench.example',
       CASE WHEN %(halfway)s AND g > %(n)s / 2 THEN 'pending'
            WHEN g %% 100 = 0 THEN 'failed' ELSE 'sent' END,
       CASE WHEN NOT (%(halfway)s AND g > %(n)s / 2) AND g %% 100 = 0 THEN 'bounced' END,
       CASE WHEN %(halfway)s AND g > %(n)s / 2 THEN 0 ELSE 1 END,
       CASE WHEN %(halfway)s AND g > %(n)s / 2 THEN NULL ELSE now() END,
       CASE WHEN g %% 100 = 0 AND NOT (%(halfway)s AND g > %(n)s / 2) THEN 550 END,
       CASE WHEN g %% 100 = 0 AND NOT (%(halfway)s AND g > %(n)s / 2)
            THEN '5.1.1 no such user' END,
       CASE WHEN g %% 100 = 0 AND NOT (%(halfway)s AND g > %(n)s / 2) THEN 'rcpt' END,
       '<' || %(b)s || '.' || g || '@bench.example>'
FROM generate_series(1, %(n)s) g
"""
EMPTY = "TRUNCATE broadcast_jobs, broadcast_counts, broadcasts, campaign_lists, campaigns CASCADE"

# main's statements before the one count, for reference (web/queries.py CAMPAIGNS, a page of
# 50; campaigns.py COUNTS).
MAIN_LIST = """
SELECT c.id, coalesce(b.total, 0) AS total,
       (SELECT count(*) FROM broadcast_jobs j
        WHERE j.broadcast_id = c.broadcast_id AND j.status = 'sent') AS sent,
       (SELECT count(*) FROM broadcast_jobs j
        WHERE j.broadcast_id = c.broadcast_id AND j.status = 'failed') AS failed
FROM campaigns c LEFT JOIN broadcasts b ON b.id = c.broadcast_id
ORDER BY c.id DESC LIMIT 50
"""
MAIN_COUNTS = """
SELECT count(*) AS total,
       count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'sending') AS sending,
       count(*) FILTER (WHERE status = 'retry') AS retry,
       count(*) FILTER (WHERE status = 'sent') AS sent,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       count(*) FILTER (WHERE status = 'failed' AND failure = 'bounced') AS bounced,
       count(*) FILTER (WHERE status = 'cancelled') AS cancelled
FROM broadcast_jobs WHERE broadcast_id = %s
"""


def seed(conn: Conn, campaigns: int, jobs: int, err: Console) -> list[int]:
    """`campaigns` campaigns of `jobs` jobs each; their ids."""
    conn.execute(EMPTY)
    row = conn.execute(
        "INSERT INTO lists (name) VALUES ('bench') ON CONFLICT (name) DO UPDATE"
        " SET name = excluded.name RETURNING id"
    ).fetchone()
    assert row is not None
    ids = []
    t0 = time.perf_counter()
    for i in range(campaigns):
        halfway = i % 2 == 1
        with conn.transaction():
            c = conn.execute(
                CAMPAIGN,
                {"name": f"bench {i}", "list": row["id"], "status": ("sent", "sending")[halfway]},
            ).fetchone()
            assert c is not None
            conn.execute(
                "INSERT INTO campaign_lists (campaign_id, list_id) VALUES (%s, %s)",
                (c["id"], row["id"]),
            )
            b = conn.execute(
                BROADCAST,
                {"c": c["id"], "n": jobs, "status": "running" if halfway else "finished"},
            ).fetchone()
            assert b is not None
            conn.execute("UPDATE campaigns SET broadcast_id = %s WHERE id = %s", (b["id"], c["id"]))
            conn.execute(JOBS, {"b": b["id"], "n": jobs, "halfway": halfway})
        ids.append(int(c["id"]))
        took = time.perf_counter() - t0
        err.print(f"  seeded {i + 1}/{campaigns} of {jobs:,} jobs ({took:.0f} s)")
    conn.execute("VACUUM ANALYZE broadcast_jobs")
    conn.execute("VACUUM ANALYZE broadcast_counts")
    return ids


def median_ms(runs: int, call: Callable[[], object]) -> float:
    call()  # warm: plans, caches, the pool's connection
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


@contextmanager
def serving(url: str) -> Iterator[str]:
    """`senddock serve --no-workers` on a free port; its base URL."""
    port = free_port()
    env = env_for(url, "smtp://127.0.0.1:1")
    log = Path(tempfile.mkstemp(prefix="count-latency-", suffix=".log")[1])
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "senddock", "serve", "--port", str(port), "--no-workers"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            sys.exit(f"senddock serve did not start; see {log}")
        yield base
    finally:
        proc.terminate()
        proc.wait(30)


def token(url: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "senddock", "token", "create", "--name", "bench"],
        env=env_for(url, "smtp://127.0.0.1:1"),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def measure(conn: Conn, base: str, api_token: str, ids: list[int], runs: int) -> dict[str, float]:
    api = httpx.Client(base_url=base, timeout=120, headers={"Authorization": f"Bearer {api_token}"})
    dash = httpx.Client(base_url=base, timeout=120)
    with api, dash:
        page = dash.get("/login").text
        csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        login = {"csrf": csrf, "email": EMAIL, "password": PASSWORD, "next": "/"}
        assert dash.post("/login", data=login).status_code == 303

        def listed(client: httpx.Client, path: str) -> Callable[[], object]:
            def get() -> object:
                r = client.get(path)
                assert r.status_code == 200, r.text
                return r

            return get

        finished, halfway = ids[0], ids[1]
        slow = max(3, runs // 5)  # main's statements at a million take seconds each
        return {
            "dashboard campaign list (GET /)": median_ms(runs, listed(dash, "/")),
            "API campaign list (GET /api/v1/campaigns)": median_ms(
                runs, listed(api, "/api/v1/campaigns")
            ),
            "campaign status, finished": median_ms(runs, lambda: status(conn, finished)),
            "campaign status, half way": median_ms(runs, lambda: status(conn, halfway)),
            "main's API list statement (reference)": median_ms(
                slow, lambda: conn.execute(MAIN_LIST).fetchall()
            ),
            "main's status COUNTS (reference)": median_ms(
                slow, lambda: conn.execute(MAIN_COUNTS, (finished,)).fetchall()
            ),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--campaigns", type=int, default=20)
    parser.add_argument("--small", type=int, default=10_000, help="jobs a broadcast, small")
    parser.add_argument("--big", type=int, default=1_000_000, help="jobs a broadcast, big")
    parser.add_argument("--runs", type=int, default=20, help="timed runs a measure (median)")
    parser.add_argument("--database-url", help="a server to make a throwaway database on")
    args = parser.parse_args()
    err = Console(stderr=True)
    results: dict[int, dict[str, float]] = {}
    with database(args.database_url) as (url, _), connect(url) as conn:
        auth.create_admin(conn, EMAIL, PASSWORD)
        api_token = token(url)
        with serving(url) as base:
            for size in (args.small, args.big):
                err.print(f"{args.campaigns} campaigns of {size:,} jobs")
                ids = seed(conn, args.campaigns, size, err)
                results[size] = measure(conn, base, api_token, ids, args.runs)
    table = Table(title=f"Median ms of {args.runs} runs, {args.campaigns} campaigns")
    table.add_column("measure")
    for size in results:
        table.add_column(f"{size:,} jobs each", justify="right")
    table.add_column("big / small", justify="right")
    for name in results[args.small]:
        small, big = results[args.small][name], results[args.big][name]
        table.add_row(name, f"{small:.1f}", f"{big:.1f}", f"{big / small:.2f}x")
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
