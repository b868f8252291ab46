"""Dashboard sessions, kept in Postgres so that ending one takes effect at once.

The signed cookie (Starlette SessionMiddleware) carries a random session id and the CSRF
token; the `sessions` row, keyed by the id's SHA-256, says whose session it is. `SessionCheck`
looks the id up on every request that carries one, so a deleted row ends the session at the
next request, in every `serve` process: logout deletes it, a new password deletes all of that
admin's (auth.sql, set_password), removing the admin deletes them by cascade. A session also ends
`session_idle_timeout` after its last request and `session_lifetime` after sign-in, both
judged on the database clock.

A row per session rather than a generation number per admin: logging out in one browser
must not end the admin's other sessions, and only a row can say when it was last used.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.rows import DictRow
from psycopg_pool import ConnectionPool
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from senddock.db import sql
from senddock.web.auth import SESSION_ADMIN, SESSION_ID

Conn = psycopg.Connection[dict[str, Any]]
Pool = ConnectionPool[psycopg.Connection[DictRow]]

QUERIES = sql.load(__package__, "sessions.sql")


def _hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "surrogateescape")).hexdigest()


def _bounds(idle: float, lifetime: float) -> dict[str, timedelta]:
    return {"idle": timedelta(seconds=idle), "lifetime": timedelta(seconds=lifetime)}


def start(conn: Conn, admin_id: int, idle: float, lifetime: float) -> str:
    """A new session for `admin_id`: its id, for the cookie (only its hash is stored)."""
    conn.execute(QUERIES["sweep"], _bounds(idle, lifetime))
    session_id = secrets.token_urlsafe(32)
    conn.execute(QUERIES["start"], {"id_hash": _hash(session_id), "admin": admin_id})
    return session_id


def resolve(conn: Conn, session_id: str, idle: float, lifetime: float) -> int | None:
    """The admin of a live session; None when it ended, expired or never existed."""
    if len(session_id) > 100:
        return None
    params = {"id_hash": _hash(session_id), **_bounds(idle, lifetime)}
    row = conn.execute(QUERIES["resolve"], params).fetchone()
    return int(row["admin_id"]) if row else None


def end(conn: Conn, session_id: str) -> None:
    """End one session (logout)."""
    conn.execute(QUERIES["end"], {"id_hash": _hash(session_id)})


class SessionCheck:
    """ASGI middleware, inside SessionMiddleware: the cookie's session id becomes the request
    state's admin id (auth.session_admin), looked up once per request in the thread pool; an
    id whose session ended is dropped from the cookie."""

    def __init__(self, app: ASGIApp, pool: Pool, idle: float, lifetime: float) -> None:
        self.app = app
        self.pool = pool
        self.idle = idle
        self.lifetime = lifetime

    def _resolve(self, session_id: str) -> int | None:
        with self.pool.connection() as conn:
            return resolve(conn, session_id, self.idle, self.lifetime)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            admin_id = None
            cookie: dict[str, Any] = scope.get("session") or {}
            session_id = cookie.get(SESSION_ID)
            if isinstance(session_id, str):
                admin_id = await run_in_threadpool(self._resolve, session_id)
                if admin_id is None:
                    del cookie[SESSION_ID]
            scope.setdefault("state", {})[SESSION_ADMIN] = admin_id
        await self.app(scope, receive, send)
