"""The web's one read layer: the pages of long tables that the API and the dashboard show.

Writes go through the service modules (campaigns, audience); this module only reads, with the
statements of queries.sql. Counts are the queue's (`senddock.queue.counts`), never counted
here. Searches are case-insensitive substring matches with LIKE wildcards escaped (`like`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Literal

import psycopg
from psycopg import sql as pgsql

from senddock.audience.segment_filter import condition
from senddock.campaigns import UnknownCampaign
from senddock.campaigns.recipients import RecipientRow, counted_page
from senddock.db import sql
from senddock.queue.counts import Counts, counts_of, percent_done, shown_status

QUERIES = sql.load(__package__, "queries.sql")

Conn = psycopg.Connection[dict[str, Any]]
Rows = list[dict[str, Any]]

# The two orders of the subscriber page, each read from its own index (see queries.sql).
SubscriberOrder = Literal["id", "email"]
SUBSCRIBER_ORDERS: dict[str, str] = {"id": "s.id", "email": "lower(s.email)"}

# The shortest span a rate is averaged over: two sends 10 ms apart are not 6,000/min.
RATE_MIN_SECONDS = 5.0


def like(term: str | None) -> str | None:
    """An ILIKE pattern matching `term` anywhere, its wildcards taken literally; None for no
    search."""
    if term is None or not term.strip():
        return None
    escaped = term.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _total(rows: Rows, count: Callable[[], int]) -> tuple[Rows, int]:
    """Rows without their window count, and the total (counted apart past the last page)."""
    total = int(rows[0]["full_count"]) if rows else count()
    for r in rows:
        r.pop("full_count", None)
    return rows, total


# -- subscribers ------------------------------------------------------------------------------


def subscribers_page(
    conn: Conn,
    pattern: str | None,
    list_name: str | None,
    limit: int,
    offset: int,
    order: SubscriberOrder = "id",
    filter_text: str | None = None,
) -> Rows:
    """A page of subscribers (matching the ILIKE `pattern`, on `list_name`, matching the
    segment filter `filter_text`), by id or address. A bad filter: SegmentError (422)."""
    where = condition(filter_text)
    statement = pgsql.SQL(QUERIES["subscribers"]).format(
        order=pgsql.SQL(SUBSCRIBER_ORDERS[order]), audience=where.sql
    )
    params = {"q": pattern, "list": list_name, "limit": limit, "offset": offset, **where.params}
    return conn.execute(statement, params).fetchall()


def subscriber_total(
    conn: Conn, pattern: str | None, list_name: str | None, filter_text: str | None = None
) -> int:
    """How many subscribers `subscribers_page` pages through."""
    where = condition(filter_text)
    statement = pgsql.SQL(QUERIES["subscriber_total"]).format(audience=where.sql)
    row = conn.execute(statement, {"q": pattern, "list": list_name, **where.params}).fetchone()
    return int(row["n"]) if row else 0


def subscriber_addresses(
    conn: Conn,
    pattern: str | None,
    list_name: str | None,
    filter_text: str | None,
    ids: list[int] | None,
    limit: int,
) -> list[tuple[int, str]]:
    """(id, address) of the subscribers `subscribers_page` pages through (of `ids` only, when
    given), by id, at most `limit`. A bad filter: SegmentError (422)."""
    where = condition(filter_text)
    statement = pgsql.SQL(QUERIES["subscriber_addresses"]).format(audience=where.sql)
    params = {"q": pattern, "list": list_name, "ids": ids, "limit": limit, **where.params}
    return [(int(r["id"]), str(r["email"])) for r in conn.execute(statement, params)]


def membership_status(conn: Conn, email: str, list_name: str) -> str | None:
    """confirmed, unconfirmed or unsubscribed on that list; None when not on it."""
    row = conn.execute(QUERIES["membership_status"], {"email": email, "list": list_name}).fetchone()
    return str(row["status"]) if row else None


def subscriber_email(conn: Conn, subscriber_id: int) -> str | None:
    row = conn.execute(QUERIES["subscriber_email"], {"id": subscriber_id}).fetchone()
    return str(row["email"]) if row else None


def subscriber(conn: Conn, subscriber_id: int) -> dict[str, Any] | None:
    """One subscriber's fields and suppression, by id; None when there is none."""
    return conn.execute(QUERIES["subscriber"], {"id": subscriber_id}).fetchone()


def subscriber_lists(conn: Conn, subscriber_id: int) -> Rows:
    """The lists a subscriber is on, with each membership's status."""
    return conn.execute(QUERIES["subscriber_lists"], {"id": subscriber_id}).fetchall()


def subscriber_history(conn: Conn, subscriber_id: int, limit: int, offset: int) -> Rows:
    """A page of a subscriber's messages (their job rows), newest first."""
    params = {"id": subscriber_id, "limit": limit, "offset": offset}
    return conn.execute(QUERIES["subscriber_history"], params).fetchall()


def subscriber_bounces(conn: Conn, subscriber_id: int, email: str, limit: int, offset: int) -> Rows:
    """A page of the bounce and complaint reports about a subscriber, newest first."""
    params = {"id": subscriber_id, "email": email, "limit": limit, "offset": offset}
    return conn.execute(QUERIES["subscriber_bounces"], params).fetchall()


def suppressions_page(
    conn: Conn, pattern: str | None, reason: str | None, limit: int, offset: int
) -> Rows:
    params = {"q": pattern, "reason": reason, "limit": limit, "offset": offset}
    return conn.execute(QUERIES["suppressions"], params).fetchall()


# -- campaigns --------------------------------------------------------------------------------


def campaigns_page(
    conn: Conn, status: str | None, limit: int, offset: int, archived: bool = False
) -> tuple[Rows, int]:
    """A page of campaigns, newest first (optionally of one status), archived or not, each
    with the queue's counts and its progress; and how many such campaigns there are."""
    params: dict[str, Any] = {
        "status": status,
        "limit": limit,
        "offset": offset,
        "archived": archived,
    }
    with conn.transaction():
        conn.execute(QUERIES["snapshot"])
        rows = conn.execute(QUERIES["campaigns"], params).fetchall()
        counts = counts_of(conn, [int(r["broadcast_id"]) for r in rows if r["broadcast_id"]])

    def count() -> int:
        row = conn.execute(QUERIES["campaign_total"], params).fetchone()
        return int(row["n"]) if row else 0

    rows, total = _total(rows, count)
    none = Counts()
    page = []
    for r in rows:
        of = counts.get(r["broadcast_id"], none)
        shown = {
            **of.as_dict(),
            "done": of.done,
            "percent": percent_done(r["status"], of),
            "complaint_rate": of.complaint_rate,
            "state": shown_status(r["status"], of),
        }
        page.append({**r, "lists": list(r["lists"]), **shown})
    return page, total


def campaign(conn: Conn, campaign_id: int) -> dict[str, Any] | None:
    return conn.execute(QUERIES["campaign"], {"id": campaign_id}).fetchone()


def recipients_page(
    conn: Conn, campaign_id: int, status: str | None, q: str | None, page: int, per_page: int
) -> tuple[list[RecipientRow], int]:
    """One page of a campaign's recipients with their outcome, and how many match; none
    before it is sent.

    `status` is a job status (sent, failed, …) or a failure reason (bounced, exhausted, …).
    """
    row = conn.execute(QUERIES["campaign_broadcast"], {"id": campaign_id}).fetchone()
    if row is None:
        raise UnknownCampaign(f"no campaign with id {campaign_id}")
    if row["broadcast_id"] is None:
        return [], 0
    bid, offset = row["broadcast_id"], (page - 1) * per_page
    return counted_page(conn, bid, status, like(q), per_page, offset)


def rate(conn: Conn, broadcast_id: int) -> int:
    """Messages sent a minute: those of the last minute over the time since the first of them
    (at least RATE_MIN_SECONDS), not over the whole minute, which showed 200/min 10 s into a
    1,200/min send."""
    row = conn.execute(QUERIES["rate"], {"b": broadcast_id}).fetchone()
    if row is None or not row["n"]:
        return 0
    seconds = min(max(float(row["seconds"] or 0.0), RATE_MIN_SECONDS), 60.0)
    return round(int(row["n"]) * 60 / seconds)


def per_minute(
    conn: Conn, broadcast_id: int, live: bool, minutes: int = 30
) -> list[tuple[datetime, int]]:
    """Sent per minute, oldest first, with empty minutes filled in.

    The window ends now while the campaign is live, else at its last send; it spans at least
    10 minutes and at most `minutes`.
    """
    rows = conn.execute(QUERIES["per_minute"], {"b": broadcast_id, "minutes": minutes}).fetchall()
    sent = {r["minute"]: int(r["sent"]) for r in rows}
    now = conn.execute(QUERIES["now_minute"]).fetchone()
    if live and now is not None:
        end = now["now"]
    elif sent:
        end = max(sent)
    else:
        return []
    start = min(sent) if sent else end
    span = (end - start) // timedelta(minutes=1) + 1
    span = min(max(span, 10), minutes)
    return [
        (m, sent.get(m, 0)) for m in (end - timedelta(minutes=i) for i in range(span - 1, -1, -1))
    ]
