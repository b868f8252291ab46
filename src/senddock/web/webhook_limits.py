"""Failed webhook signatures, counted per client address in Postgres (every `serve` shares them).

A request to /webhooks/ whose signature does not hold (403) or whose Postmark credentials are
wrong (401) is counted under `webhook:IP` (IP as login_limits.client_key: an IPv6 one by its
/64) in the sign-in attempts table, with the same one-statement UPSERT and the same window.
Once an address has FAILURES failures in its window, every webhook request from it is
answered 429 before its signature is checked, so a guesser gets FAILURES tries per window
however many `serve` processes it spreads them over. A provider signs correctly, so it is
never counted. With Postgres unreachable the check fails and the request is answered 503,
as the store would answer it: the provider sends it again.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import psycopg_pool
from psycopg_pool import ConnectionPool

from senddock.db import sql
from senddock.web import login_limits

QUERIES = sql.load(__package__, "webhook_limits.sql")

FAILURES = 20
WINDOW = timedelta(seconds=login_limits.WINDOW)

Pool = ConnectionPool[psycopg.Connection[Any]]


def key(host: str | None) -> str:
    return f"webhook:{login_limits.client_key(host)}"


def refused(pool: Pool, host: str | None) -> bool:
    """Whether this client has used up its failed signatures for the window (raises what the
    pool raises when Postgres is unavailable: the caller answers 503)."""
    with pool.connection() as conn:
        found = conn.execute(QUERIES["failures"], {"key": key(host), "window": WINDOW}).fetchone()
    return found is not None and int(found["attempts"]) >= FAILURES


def failed(pool: Pool, host: str | None) -> None:
    """Count one failed signature from this client."""
    try:
        with pool.connection() as conn:
            conn.execute(login_limits.QUERIES["reserve"], {"key": key(host), "window": WINDOW})
    except (psycopg.OperationalError, psycopg_pool.PoolTimeout):
        return
