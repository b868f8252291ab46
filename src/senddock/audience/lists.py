"""Lists by name."""

from __future__ import annotations

from typing import Any

import psycopg


class UnknownList(LookupError):
    """No list by that name."""


def ensure_list(conn: psycopg.Connection[dict[str, Any]], name: str) -> int:
    """The id of list `name`, created if it does not exist yet."""
    row = conn.execute(
        "INSERT INTO lists (name) VALUES (%s) ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name"
        " RETURNING id",
        (name,),
    ).fetchone()
    assert row is not None
    return int(row["id"])


def find_list(conn: psycopg.Connection[dict[str, Any]], name: str) -> int:
    """The id of list `name`; UnknownList if there is none."""
    row = conn.execute("SELECT id FROM lists WHERE name = %s", (name,)).fetchone()
    if row is None:
        raise UnknownList(f"no list named {name!r}")
    return int(row["id"])
