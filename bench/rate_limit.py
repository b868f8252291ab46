"""How close a per-second limit gets to its limit, counted at the relay.

    .venv/bin/python bench/rate_limit.py                      # 400/s, relay 3 ms slow per dot
    .venv/bin/python bench/rate_limit.py --limit 40 --dot-ms 0 --seconds 6 --workers 2

One real `senddock worker` process per --workers drains `limit x seconds` recipients to the
in-process Catcher with `per_second=limit` on its SMTP URL. Printed: the messages the relay
accepted in each 1-second window (aligned like the limiter's), the mean of the full windows
(the first and last are partial) and that mean over the limit. tests/test_rate_limits.py
asserts only the ceiling (no window over the limit); this figure is a speed, so it lives here
(2026-12-01, 400/s with the relay 3 ms slow: 400 in each second on a quiet machine, as the
README says; 374, 0.94, on a busy one, where the test's old `mean >= 0.95 * limit` failed;
0.71 here on two cores shared with other test runs, windows [390, 364, 111, 253, 380, ...]).
Uses SENDDOCK_DATABASE_URL if set, else an embedded Postgres in a temp folder.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from senddock.audience.lists import ensure_list
from senddock.campaigns import broadcast, create_campaign
from senddock.db import connect, migrate
from senddock.db.embedded import given_or_embedded
from senddock.testing import Catcher

SRC = Path(__file__).resolve().parent.parent / "src"
SEED = """
INSERT INTO subscribers (email, name)
SELECT 'r' || g || '@' || %(tag)s::text || '.example', 'Reader ' || g
FROM generate_series(1, %(n)s::int) g
"""
JOIN = """
INSERT INTO list_memberships (list_id, subscriber_id)
SELECT %(list)s, id FROM subscribers WHERE email LIKE '%%@' || %(tag)s::text || '.example'
"""


def drain(url: str, catcher: Catcher, limit: int, seconds: int, workers: int) -> list[int]:
    """Send limit x seconds recipients through `workers` processes; accepted per window."""
    n = limit * seconds
    tag = f"rl{time.time_ns()}"
    with connect(url) as conn:
        migrate(conn)
        list_id = ensure_list(conn, tag)
        with conn.transaction():
            conn.execute(SEED, {"n": n, "tag": tag})
            conn.execute(JOIN, {"list": list_id, "tag": tag})
        cid = create_campaign(
            conn,
            name=tag,
            list_name=tag,
            subject="Hi {{ subscriber.name }}",
            from_addr="bench@example.org",
            text_body="Hello {{ subscriber.name }}\n",
        )
        env = {
            **os.environ,
            "SENDDOCK_DATABASE_URL": url,
            "SENDDOCK_SMTP_URL": f"{catcher.url}&per_second={limit}&name={secrets.token_hex(4)}",
            "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        }
        broadcast(conn, cid)
        cmd = [sys.executable, "-m", "senddock", "worker", "--processes", "1"]
        procs = [subprocess.Popen(cmd, env=env) for _ in range(workers)]
        try:
            deadline = time.monotonic() + seconds * 5 + 60
            while time.monotonic() < deadline:
                row = conn.execute("SELECT status FROM campaigns WHERE id = %s", (cid,)).fetchone()
                if row is not None and row["status"] == "sent":
                    break
                time.sleep(0.2)
            else:
                raise SystemExit("the campaign did not finish in time")
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(30)
    counts = Counter(int(r.at) for r in catcher.received())
    return [counts[w] for w in range(min(counts), max(counts) + 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--limit", type=int, default=400, help="per_second (default 400)")
    parser.add_argument("--seconds", type=int, default=6, help="seconds' worth of recipients")
    parser.add_argument("--dot-ms", type=float, default=3.0, help="relay delay per final dot")
    parser.add_argument("--workers", type=int, default=1, help="worker processes")
    args = parser.parse_args()
    with given_or_embedded("sdrate") as url, Catcher() as catcher:
        catcher.dot_delay = args.dot_ms / 1000
        windows = drain(url, catcher, args.limit, args.seconds, args.workers)
    full = windows[1:-1] or windows
    mean = sum(full) / len(full)
    print(f"limit {args.limit}/s, relay {args.dot_ms:g} ms per dot, {args.workers} worker(s)")
    print(f"accepted per 1-s window: {windows}")
    print(f"max {max(windows)} (ceiling {args.limit}); full-window mean {mean:.1f}")
    print(f"mean / limit: {mean / args.limit:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
