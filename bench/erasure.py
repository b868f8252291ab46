"""What erasure costs (migration 0031, audience/erasure.py): the enqueue's check of kept
suppression digests, and one erasure among many jobs and kept bounce messages.

    .venv/bin/python bench/erasure.py                 # 100,000 recipients, 3 rounds
    .venv/bin/python bench/erasure.py 20000 --rounds 2 --messages 2000

Enqueue: each round enqueues one broadcast to N subscribers twice, with no digest kept and
with 1,000 (order alternating), as bench/enqueue.py does. Erasure: M kept bounce messages that
no finding was read from (state `none`, 4 KB each, the rows erasure searches byte by byte),
then the erasure of one subscriber who has a job in every broadcast enqueued, timed.
Import: N new addresses from a CSV (audience/importer.py), with the triggers of 0031 that
re-suppress an erased address and with them disabled (order alternating, 1,000 digests kept):
what the triggers cost every import. Prints medians. Uses SENDDOCK_DATABASE_URL if set, else an
embedded Postgres in a temp folder.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from rich.console import Console
from rich.table import Table

from enqueue import JOIN, SEED, _campaign, enqueue_rest
from senddock.audience import erasure, import_csv
from senddock.audience.lists import ensure_list
from senddock.campaigns import broadcast
from senddock.campaigns.broadcast import CHUNK
from senddock.db import connect, migrate
from senddock.db.embedded import given_or_embedded

Conn = psycopg.Connection[dict[str, object]]

DIGESTS = """
INSERT INTO erased_suppressions (digest, reason)
SELECT sha256(convert_to('gone' || g || '@elsewhere.example', 'UTF8')), 'bench'
FROM generate_series(1, 1000) g
ON CONFLICT (digest) DO NOTHING
"""
MESSAGES = """
INSERT INTO bounce_messages (source, digest, size, raw, state)
SELECT 'pipe', sha256(convert_to('m' || g, 'UTF8')), 4096,
       convert_to(repeat('Auto-reply: out of office until Monday. ', 100), 'UTF8'), 'none'
FROM generate_series(1, %(m)s::int) g
"""


def _enqueue(url: str, conn: Conn, name: str) -> float:
    cid = _campaign(conn, "big", name)
    t0 = time.perf_counter()
    bid, _, _ = broadcast(conn, cid)
    enqueue_rest(url, bid, CHUNK)
    return time.perf_counter() - t0


TRIGGERS = "subscribers_resuppress_inserted, subscribers_resuppress_updated"


def _import(conn: Conn, n: int, tag: str, triggers: bool) -> float:
    """Seconds to import `n` new addresses, with the re-suppressing triggers on or off."""
    switch = "ENABLE" if triggers else "DISABLE"
    for name in TRIGGERS.split(", "):
        conn.execute(f"ALTER TABLE subscribers {switch} TRIGGER {name}")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "people.csv"
        rows = "".join(f"new{g}@{tag}.example,Person {g}\n" for g in range(n))
        path.write_text("email,name\n" + rows, encoding="utf-8")
        t0 = time.perf_counter()
        import_csv(conn, path, tag)
        return time.perf_counter() - t0


def run(url: str, n: int, rounds: int, messages: int) -> dict[str, float]:
    """Medians: enqueue seconds without and with digests; the erasure in ms; import seconds
    with the triggers and without."""
    times: dict[str, list[float]] = {
        "none": [],
        "1,000": [],
        "erase": [],
        "import on": [],
        "import off": [],
    }
    with connect(url) as conn:
        migrate(conn)
        list_id = ensure_list(conn, "big")
        with conn.transaction():
            conn.execute(SEED, {"n": n, "tag": "big"})
            conn.execute(JOIN, {"list": list_id, "tag": "big"})
        conn.execute("VACUUM ANALYZE subscribers")
        conn.execute("VACUUM ANALYZE list_memberships")
        for i in range(rounds):
            for kept in (False, True) if i % 2 == 0 else (True, False):
                conn.execute(DIGESTS if kept else "TRUNCATE erased_suppressions")
                conn.execute("CHECKPOINT")
                times["1,000" if kept else "none"].append(_enqueue(url, conn, f"r{i}-{kept}"))
        conn.execute(MESSAGES, {"m": messages})
        conn.execute("VACUUM ANALYZE")
        for k in range(3):
            t0 = time.perf_counter()
            erasure.erase(conn, f"user{k + 1}@benchbig.example")
            times["erase"].append((time.perf_counter() - t0) * 1000)
        conn.execute(DIGESTS)
        for i in range(rounds):
            for on in (True, False) if i % 2 == 0 else (False, True):
                took = _import(conn, n, f"imp{i}{'on' if on else 'off'}", on)
                times["import on" if on else "import off"].append(took)
        _import(conn, 0, "none", True)  # the triggers back on
    return {key: statistics.median(v) for key, v in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("n", nargs="?", type=int, default=100_000, help="recipients")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=10_000, help="kept bounce messages")
    args = parser.parse_args()
    with given_or_embedded("sdbench") as url:
        med = run(url, args.n, args.rounds, args.messages)
    table = Table(title=f"Erasure: enqueue of {args.n:,} jobs ({args.rounds} rounds)")
    for col in ("", "seconds or ms"):
        table.add_column(col, justify="right")
    table.add_row("enqueue, no digest kept (s)", f"{med['none']:.2f}")
    table.add_row("enqueue, 1,000 digests kept (s)", f"{med['1,000']:.2f}")
    table.add_row("ratio", f"{med['1,000'] / med['none']:.2f}")
    table.add_row(
        f"erase one subscriber, jobs in {2 * args.rounds} broadcasts,"
        f" {args.messages:,} messages kept (ms)",
        f"{med['erase']:.1f}",
    )
    table.add_row(f"import of {args.n:,} new addresses, triggers on (s)", f"{med['import on']:.2f}")
    table.add_row(
        f"import of {args.n:,} new addresses, triggers off (s)", f"{med['import off']:.2f}"
    )
    table.add_row("ratio", f"{med['import on'] / med['import off']:.2f}")
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
