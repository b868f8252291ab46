"""The preference centre: a subscriber, through their signed link, leaves or rejoins lists,
or unsubscribes from everything. No HTTP here (web/preferences.py serves the page).

The page shows every public list and every list the subscriber has a membership of. Each
change is one transaction: the subscriber row locked, the membership written, and a row in
`subscription_events` (action, source, campaign, time). Leaving makes the membership
`unsubscribed`, which the next broadcast's enqueue skips and an import never undoes; joining
makes it `confirmed`; unsubscribing from everything also suppresses the address, and
rejoining a list afterwards lifts that suppression (only one whose reason is `unsubscribe`)
and leaves every other list (the page showed them as left: rejoining one resumes only it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from senddock.db import sql
from senddock.errors import Conflict, NotFound

QUERIES = sql.load(__package__, "preferences.sql")

Conn = psycopg.Connection[dict[str, Any]]
Action = Literal["join", "leave", "unsubscribe_all"]
PAGE = "preferences page"


class UnknownSubscriber(NotFound, LookupError):
    """The link names a subscriber that no longer exists (404)."""


class NotOnPage(NotFound, LookupError):
    """A list the subscriber's page does not show (private, never a member): 404."""


class StillSuppressed(Conflict, RuntimeError):
    """Rejoining an address suppressed by a bounce, a complaint or by hand (409)."""


@dataclass(frozen=True)
class ListChoice:
    id: int
    name: str
    public: bool
    status: str | None  # confirmed | unconfirmed | unsubscribed | None (never a member)

    @property
    def receiving(self) -> bool:
        return self.status in ("confirmed", "unconfirmed")


@dataclass(frozen=True)
class Preferences:
    subscriber_id: int
    email: str
    name: str
    suppressed: str | None  # the suppression's reason, if the address is suppressed
    lists: list[ListChoice]


def _lock(conn: Conn, subscriber_id: int) -> dict[str, Any]:
    row = conn.execute(QUERIES["subscriber"], {"subscriber": subscriber_id}).fetchone()
    if row is None:
        raise UnknownSubscriber("this address is no longer on our lists")
    return row


def _lists(conn: Conn, subscriber_id: int) -> list[ListChoice]:
    rows = conn.execute(QUERIES["lists"], {"subscriber": subscriber_id}).fetchall()
    return [ListChoice(int(r["id"]), r["name"], bool(r["public"]), r["status"]) for r in rows]


def load(conn: Conn, subscriber_id: int) -> Preferences:
    """What the page shows; UnknownSubscriber if the subscriber is gone."""
    with conn.transaction():
        who = _lock(conn, subscriber_id)
        lists = _lists(conn, subscriber_id)
    return Preferences(subscriber_id, who["email"], who["name"], who["suppressed"], lists)


def _record(
    conn: Conn,
    subscriber_id: int,
    lists: list[int | None],
    action: Action,
    source: str,
    campaign_id: int | None,
) -> None:
    params = {
        "subscriber": subscriber_id,
        "lists": lists,
        "action": action,
        "source": source,
        "campaign": campaign_id,
    }
    conn.execute(QUERIES["record"], params)


def change(
    conn: Conn,
    subscriber_id: int,
    action: Action,
    list_id: int | None,
    campaign_id: int | None,
    source: str = PAGE,
) -> bool:
    """Apply one choice from the page; False when it changed nothing (already so).

    A list the page does not show (private, never a member) is NotOnPage (404)."""
    params = {"subscriber": subscriber_id, "list": list_id, "campaign": campaign_id}
    with conn.transaction():
        who = _lock(conn, subscriber_id)
        if action == "unsubscribe_all":
            left = [r["list_id"] for r in conn.execute(QUERIES["leave_all"], params)]
            suppressed = conn.execute(QUERIES["suppress_all"], {**params, "source": source})
            changed = bool(left) or suppressed.rowcount > 0
            if changed:
                _record(conn, subscriber_id, [None], action, source, campaign_id)
            return changed
        if list_id not in {c.id for c in _lists(conn, subscriber_id)}:
            raise NotOnPage("there is no such list on this page", field="list")
        if action == "join":
            if who["suppressed"] not in (None, "unsubscribe"):
                raise StillSuppressed(
                    "this address cannot receive messages (it bounced or was blocked):"
                    " write to us to be added again",
                    field="list",
                )
            lifted = conn.execute(QUERIES["lift_unsubscribe"], {"email": who["email"]}).rowcount
            if lifted:
                quiet = [r["list_id"] for r in conn.execute(QUERIES["leave_others"], params)]
                if quiet:
                    _record(conn, subscriber_id, quiet, "leave", source, campaign_id)
            changed = conn.execute(QUERIES["join"], params).rowcount > 0 or lifted > 0
        else:
            changed = conn.execute(QUERIES["leave"], params).rowcount > 0
        if changed:
            _record(conn, subscriber_id, [list_id], action, source, campaign_id)
    return changed


def leave_campaign_lists(conn: Conn, subscriber_id: int, campaign_id: int, source: str) -> bool:
    """One-click in the `lists` setting: leave the campaign's lists, suppress nothing.
    Idempotent; False when there is no such subscriber."""
    params = {"subscriber": subscriber_id, "campaign": campaign_id}
    with conn.transaction():
        try:
            _lock(conn, subscriber_id)
        except UnknownSubscriber:
            return False
        left = [r["list_id"] for r in conn.execute(QUERIES["leave_campaign_lists"], params)]
        if left:
            _record(conn, subscriber_id, left, "leave", source, campaign_id)
    return True
