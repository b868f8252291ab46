"""Subscribers one at a time: add, update, remove, show. (Many at once: the CSV importer.)"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from senddock.audience.addresses import normalize
from senddock.audience.lists import ensure_list, find_list
from senddock.db import sql
from senddock.errors import Conflict, NotFound
from senddock.messages import check_header

Conn = psycopg.Connection[dict[str, Any]]

QUERIES = sql.load(__package__, "subscribers.sql")


class SubscriberError(Conflict, ValueError):
    """A subscriber operation that cannot be done as asked (409)."""


class UnknownSubscriber(NotFound, SubscriberError, LookupError):
    """No subscriber with that address (404)."""


def _find(conn: Conn, address: str, lock: bool = False) -> dict[str, Any]:
    row = conn.execute(
        QUERIES["find_for_update" if lock else "find"], {"email": address.strip()}
    ).fetchone()
    if row is None:
        raise UnknownSubscriber(f"no subscriber {address.strip()!r}")
    return row


def _name(name: str) -> str:
    return check_header("name", name.strip(), field="name")


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
            QUERIES["insert"],
            {"email": email, "name": _name(name), "attributes": Jsonb(attributes or {})},
        ).fetchone()
        if row is None:
            raise SubscriberError(f"{email} is already a subscriber (use 'subscribers update')")
        sid = int(row["id"])
        for list_name in lists:
            conn.execute(
                QUERIES["join_list"], {"subscriber": sid, "list": ensure_list(conn, list_name)}
            )
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
        if row["status"] == "erased":
            raise SubscriberError(f"subscriber {row['id']} was erased: nothing of theirs is kept")
        merged = dict(row["attributes"] or {})
        for key, value in (attributes or {}).items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        email = normalize(new_email) if new_email else row["email"]
        try:
            conn.execute(
                QUERIES["update"],
                {
                    "email": email,
                    "name": _name(name) if name is not None else row["name"],
                    "attributes": Jsonb(merged),
                    "subscriber": row["id"],
                },
            )
        except psycopg.errors.UniqueViolation as exc:
            raise SubscriberError(f"{email} is already another subscriber") from exc
        for list_name in lists:
            conn.execute(
                QUERIES["join_list"],
                {"subscriber": row["id"], "list": ensure_list(conn, list_name)},
            )


def remove(conn: Conn, address: str, list_name: str | None = None) -> str:
    """Take a subscriber off one list, or off every list and out of the database.

    A subscriber with delivery history (job rows) keeps its row for that history, on no list.
    Messages already enqueued for them still go: suppress the address to stop those too.
    """
    with conn.transaction():
        row = _find(conn, address, lock=True)
        if list_name is not None:
            gone = conn.execute(
                QUERIES["leave_list"],
                {"list": find_list(conn, list_name), "subscriber": row["id"]},
            ).rowcount
            if not gone:
                raise SubscriberError(f"{row['email']} is not on list {list_name!r}")
            return f"{row['email']} removed from {list_name!r}"
        conn.execute(QUERIES["leave_every_list"], {"subscriber": row["id"]})
        sent = conn.execute(QUERIES["job_count"], {"subscriber": row["id"]}).fetchone()
        if sent and sent["n"]:
            return (
                f"{row['email']} removed from every list (kept for the history of"
                f" {sent['n']} {'message' if sent['n'] == 1 else 'messages'})"
            )
        conn.execute(QUERIES["delete"], {"subscriber": row["id"]})
        return f"{row['email']} deleted"


@dataclass(frozen=True)
class Membership:
    """One list a subscriber is on, and how (confirmed, unconfirmed, unsubscribed)."""

    name: str
    status: str
    created_at: datetime
    updated_at: datetime | None


@dataclass(frozen=True)
class Suppressed:
    """Why no broadcast sends to an address, and since when."""

    reason: str
    created_at: datetime
    detail: str | None


@dataclass(frozen=True)
class MessageLine:
    """One message a subscriber was sent (or is to be sent): its campaign and job state."""

    campaign_id: int
    campaign: str
    status: str
    failure: str | None
    sent_at: datetime | None
    message_id: str


@dataclass(frozen=True)
class SubscriberView:
    """Everything about one subscriber, as every face shows it: fields, lists, suppression,
    latest messages."""

    id: int
    email: str
    name: str
    status: str
    attributes: dict[str, Any]
    created_at: datetime
    updated_at: datetime | None
    lists: list[Membership]
    suppressed: Suppressed | None
    messages: list[MessageLine]

    @property
    def shown_status(self) -> str:
        """The status every face shows (see `shown_status`)."""
        return shown_status(self.status, self.suppressed is not None)


def shown_status(status: str, suppressed: bool) -> str:
    """A subscriber's status as it is shown: `suppressed` when no broadcast sends to the
    address, whatever the row says ("active" was shown, issue 35)."""
    return "suppressed" if suppressed else status


def show(conn: Conn, address: str, history: int = 20) -> SubscriberView:
    """Everything about one subscriber: fields, lists, suppression, latest messages."""
    row = _find(conn, address)
    sup = conn.execute(QUERIES["suppression"], {"email": row["email"]}).fetchone()
    lists = conn.execute(QUERIES["memberships"], {"subscriber": row["id"]}).fetchall()
    messages = conn.execute(
        QUERIES["history"], {"subscriber": row["id"], "limit": history}
    ).fetchall()
    return SubscriberView(
        **row,
        lists=[Membership(**m) for m in lists],
        suppressed=Suppressed(**sup) if sup else None,
        messages=[MessageLine(**j) for j in messages],
    )
