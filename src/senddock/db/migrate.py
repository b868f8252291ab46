"""Versioned migrations: numbered .sql files, each applied once, in order, in its own transaction.

Safe to run from several processes at once: a transaction-level advisory lock serialises
migrators. Every migration is additive, so workers of the previous version may keep running
while it applies, except those whose header says otherwise (0011 drops campaigns.list_id,
which a process older than it still writes: stop those first).
"""

from __future__ import annotations

from importlib import resources

import psycopg

from senddock.db import sql
from senddock.errors import Unavailable

_LOCK_KEY = 0x53454E44  # "SEND"
QUERIES = sql.load(__package__, "migrate.sql")


class MigrationError(Unavailable, RuntimeError):
    """The schema is missing or behind the code (503: `senddock migrate` fixes it)."""


def available() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every migration shipped with the package, in order."""
    found = []
    for entry in resources.files("senddock.db.migrations").iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            found.append((version, entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


def applied(conn: psycopg.Connection[dict[str, object]]) -> set[int]:
    """Versions already applied; empty when the schema was never created."""
    exists = conn.execute(QUERIES["schema_exists"]).fetchone()
    if not exists or not exists["e"]:
        return set()
    return {int(str(r["version"])) for r in conn.execute(QUERIES["applied"])}


def migrate(conn: psycopg.Connection[dict[str, object]]) -> list[str]:
    """Apply what is missing; return the names applied. Idempotent."""
    done: list[str] = []
    for version, name, script in available():
        with conn.transaction():
            conn.execute(QUERIES["lock"], (_LOCK_KEY,))
            conn.execute(QUERIES["bookkeeping"])
            if version in applied(conn):
                continue
            conn.execute(script.encode())
            conn.execute(QUERIES["record"], (version, name))
            done.append(name)
    return done


def check_current(conn: psycopg.Connection[dict[str, object]]) -> None:
    """Raise MigrationError unless every shipped migration is applied."""
    missing = [name for version, name, _ in available() if version not in applied(conn)]
    if missing:
        raise MigrationError(
            f"database schema is not current (missing {', '.join(missing)}): run 'senddock migrate'"
        )
