"""Subscribers one at a time: add, update, remove, show. (Many at once: the CSV importer.)"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from senddock.audience.addresses import normalize
from senddock.audience.lists import ensure_list, find_list
from senddock.messages import check_header

Conn = psycopg.Connection[dict[str, Any]]

FIND = "SELECT id, email, name, status, attributes, created_at, updated_at FROM subscribers"
# Joining a double opt-in list leaves the membership unconfirmed until the link is followed.
JOIN = """
INSERT INTO list_memberships (list_id, subscriber_id, status)
SELECT l.id, %s, CASE WHEN l.double_opt_in THEN 'unconfirmed' ELSE 'confirmed' END
FROM lists l WHERE l.id = %s
ON CONFLICT DO NOTHING
"""
MEMBERSHIPS = """
SELECT l.name, m.status, m.created_at, m.updated_at
FROM list_memberships m JOIN lists l ON l.id = m.list_id
WHERE m.subscriber_id = %s ORDER BY l.name
"""
HISTORY = """
SELECT c.id AS campaign_id, c.name AS campaign, j.status, j.failure, j.sent_at, j.message_id
FROM broadcast_jobs j JOIN broadcasts b ON b.id = j.broadcast_id
JOIN campaigns c ON c.id = b.campaign_id
WHERE j.subscriber_id = %s ORDER BY j.id DESC LIMIT %s
"""


class SubscriberError(ValueError):
    """A subscriber operation that cannot be done as asked."""


class UnknownSubscriber(SubscriberError, LookupError):
    """No subscriber with that address."""


def _find(conn: Conn, address: str, lock: bool = False) -> dict[str, Any]:
    row = conn.execute(
        FIND + " WHERE lower(email) = lower(%s)" + (" FOR UPDATE" if lock else ""),
        (address.strip(),),
    ).fetchone()
    if row is None:
        raise UnknownSubscriber(f"no subscriber {address.strip()!r}")
    return row


def _name(name: str) -> str:
    return check_header("name", name.strip())


def add(
    conn: Conn,
    address: str,
    name: str = "",
    attributes: dict[str, Any] | None = None,
    lists: tuple[str, ...] = (),
) -> int:
    """A new subscriber on each of `lists` (created if new); its id. Memberships are
    confirmed, except on double opt-in lists (see audience.optin)."""
    email = normalize(address)
    with conn.transaction():
        row = conn.execute(
            "INSERT INTO subscribers (email, name, attributes) VALUES (%s, %s, %s)"
            " ON CONFLICT ((lower(email))) DO NOTHING RETURNING id",
            (email, _name(name), Jsonb(attributes or {})),
        ).fetchone()
        if row is None:
            raise SubscriberError(f"{email} is already a subscriber (use 'subscribers update')")
        sid = int(row["id"])
        for list_name in lists:
            conn.execute(JOIN, (sid, ensure_list(conn, list_name)))
    return sid


def update(
    conn: Conn,
    address: str,
    *,
    name: str | None = None,
    attributes: dict[str, Any] | None = None,
    new_email: str | None = None,
    lists: tuple[str, ...] = (),
) -> None:
    """Change a subscriber: name, attributes (merged; a null value removes a key), address,
    and join `lists`. A membership someone left stays left."""
    with conn.transaction():
        row = _find(conn, address, lock=True)
        merged = dict(row["attributes"] or {})
        for key, value in (attributes or {}).items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        email = normalize(new_email) if new_email else row["email"]
        try:
            conn.execute(
                "UPDATE subscribers SET email = %s, name = %s, attributes = %s, updated_at = now()"
                " WHERE id = %s",
                (
                    email,
                    _name(name) if name is not None else row["name"],
                    Jsonb(merged),
                    row["id"],
                ),
            )
        except psycopg.errors.UniqueViolation as exc:
            raise SubscriberError(f"{email} is already another subscriber") from exc
        for list_name in lists:
            conn.execute(JOIN, (row["id"], ensure_list(conn, list_name)))


def remove(conn: Conn, address: str, list_name: str | None = None) -> str:
    """Take a subscriber off one list, or off every list and out of the database.

    A subscriber with delivery history (job rows) keeps its row for that history, on no list.
    Messages already enqueued for them still go: suppress the address to stop those too.
    """
    with conn.transaction():
        row = _find(conn, address, lock=True)
        if list_name is not None:
            gone = conn.execute(
                "DELETE FROM list_memberships WHERE list_id = %s AND subscriber_id = %s",
                (find_list(conn, list_name), row["id"]),
            ).rowcount
            if not gone:
                raise SubscriberError(f"{row['email']} is not on list {list_name!r}")
            return f"{row['email']} removed from {list_name!r}"
        conn.execute("DELETE FROM list_memberships WHERE subscriber_id = %s", (row["id"],))
        sent = conn.execute(
            "SELECT count(*) AS n FROM broadcast_jobs WHERE subscriber_id = %s", (row["id"],)
        ).fetchone()
        if sent and sent["n"]:
            return (
                f"{row['email']} removed from every list (kept for the history of"
                f" {sent['n']} {'message' if sent['n'] == 1 else 'messages'})"
            )
        conn.execute("DELETE FROM subscribers WHERE id = %s", (row["id"],))
        return f"{row['email']} deleted"


def show(conn: Conn, address: str, history: int = 20) -> dict[str, Any]:
    """Everything about one subscriber: fields, lists, suppression, latest messages."""
    row = _find(conn, address)
    sup = conn.execute(
        "SELECT reason, created_at, detail FROM suppressions WHERE lower(email) = lower(%s)",
        (row["email"],),
    ).fetchone()
    return {
        **row,
        "lists": conn.execute(MEMBERSHIPS, (row["id"],)).fetchall(),
        "suppressed": sup,
        "messages": conn.execute(HISTORY, (row["id"], history)).fetchall(),
    }
