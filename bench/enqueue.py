"""How long Broadcast() takes to enqueue N recipients (one set-based transaction).

    python3 dev.py senddock --help >/dev/null && .venv/bin/python bench/enqueue.py 10000 100000

Uses SENDDOCK_DATABASE_URL if set, else an embedded Postgres in a temp folder. Prints a table.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from senddock.audience.lists import ensure_list
from senddock.campaigns import broadcast, create_campaign
from senddock.db import connect, migrate
from senddock.db.embedded import EmbeddedPostgres

SEED = """
INSERT INTO subscribers (email, name)
SELECT 'user' || g || '@bench' || %(n)s::text || '.example', 'User ' || g
FROM generate_series(1, %(n)s::int) g
"""
JOIN = """
INSERT INTO list_memberships (list_id, subscriber_id)
SELECT %(list)s, id FROM subscribers WHERE email LIKE '%%@bench' || %(n)s::text || '.example'
"""


def measure(url: str, sizes: list[int]) -> list[tuple[int, float, float]]:
    rows = []
    with connect(url) as conn:
        migrate(conn)
        for n in sizes:
            list_id = ensure_list(conn, f"bench-{n}-{time.time_ns()}")
            with conn.transaction():
                conn.execute(SEED, {"n": n})
                conn.execute(JOIN, {"list": list_id, "n": n})
            conn.execute("ANALYZE")
            name = conn.execute("SELECT name FROM lists WHERE id = %s", (list_id,)).fetchone()
            assert name is not None
            cid = create_campaign(
                conn,
                name="bench",
                list_name=str(name["name"]),
                subject="Hi {{ subscriber.name }}",
                from_addr="bench@example.org",
                text_body="Hello {{ subscriber.name }}\n",
            )
            t0 = time.perf_counter()
            _, total, _ = broadcast(conn, cid)
            took = time.perf_counter() - t0
            assert total == n, (total, n)
            rows.append((n, took, n / took))
    return rows


def main() -> int:
    sizes = [int(a) for a in sys.argv[1:]] or [10_000, 100_000]
    url = os.environ.get("SENDDOCK_DATABASE_URL")
    server = None
    if not url:
        server = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="sdbench")) / "pg", delete=True)
        url = server.start()
    try:
        rows = measure(url, sizes)
    finally:
        if server is not None:
            server.stop()
    table = Table(title="Broadcast() enqueue (one transaction, set-based)")
    for col in ("recipients", "seconds", "jobs/s"):
        table.add_column(col, justify="right")
    for n, took, rate in rows:
        table.add_row(f"{n:,}", f"{took:.3f}", f"{rate:,.0f}")
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
