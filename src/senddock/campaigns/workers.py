"""Is anyone there to send? The live workers, as `campaign send` warns about them.

Read only; liveness itself (and rescue) is delivery/rescuer.py's. A worker is counted live
while its heartbeat, on the database clock, is younger than the lease and it is not stopping.
"""

from __future__ import annotations

from typing import Any

import psycopg

from senddock.db import sql

QUERIES = sql.load(__package__, "workers.sql")

NO_WORKER = "no worker is running: nothing will be sent until `senddock worker` runs"


def live_workers(conn: psycopg.Connection[dict[str, Any]], lease_seconds: float) -> int:
    """How many workers have beaten their heartbeat within the lease."""
    row = conn.execute(QUERIES["live"], {"lease": lease_seconds}).fetchone()
    return int(row["n"]) if row else 0


def send_warning(conn: psycopg.Connection[dict[str, Any]], lease_seconds: float) -> str | None:
    """The warning for `campaign send` when no worker is live; else None."""
    return NO_WORKER if live_workers(conn, lease_seconds) == 0 else None
