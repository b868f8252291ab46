"""Lists by name, and their options (double opt-in)."""

from __future__ import annotations

import email.utils
from typing import Any

import psycopg

from senddock.db import sql
from senddock.errors import Invalid

QUERIES = sql.load(__package__, "lists.sql")


class UnknownList(Invalid, LookupError):
    """No list by that name: bad input (422, about `lists`), not an unknown id."""


def ensure_list(conn: psycopg.Connection[dict[str, Any]], name: str) -> int:
    """The id of list `name`, created if it does not exist yet."""
    row = conn.execute(QUERIES["ensure_list"], {"name": name}).fetchone()
    assert row is not None
    return int(row["id"])


def find_list(conn: psycopg.Connection[dict[str, Any]], name: str) -> int:
    """The id of list `name`; UnknownList if there is none."""
    row = conn.execute(QUERIES["find_list"], {"name": name}).fetchone()
    if row is None:
        raise UnknownList(f"no list named {name!r}", field="lists")
    return int(row["id"])


class ListError(Invalid, ValueError):
    """A list setting that cannot be applied (422)."""


def configure(
    conn: psycopg.Connection[dict[str, Any]],
    name: str,
    *,
    double_opt_in: bool | None = None,
    from_addr: str | None = None,
) -> int:
    """Create list `name` if needed and set its options; its id.

    A double opt-in list needs a From address for its confirmation requests.
    """
    from senddock.audience.addresses import normalize
    from senddock.messages import check_header

    if from_addr is not None:
        check_header("from", from_addr, field="from_addr")
        normalize(email.utils.parseaddr(from_addr)[1], field="from_addr")
    try:
        with conn.transaction():
            list_id = ensure_list(conn, name)
            conn.execute(
                QUERIES["set_options"],
                {"double_opt_in": double_opt_in, "from_addr": from_addr, "list": list_id},
            )
    except psycopg.errors.CheckViolation as exc:
        raise ListError(
            f"list {name!r}: double opt-in needs --from (who asks to confirm)", field="from_addr"
        ) from exc
    return list_id


def all_lists(conn: psycopg.Connection[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every list with its options and member counts by status."""
    return conn.execute(QUERIES["all_lists"]).fetchall()
