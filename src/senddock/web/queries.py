"""Paginated, searchable reads the web needs and the CLI does not (the CLI streams everything).

Searches are case-insensitive substring matches with LIKE wildcards escaped.
"""

from __future__ import annotations

from typing import Any

import psycopg

from senddock.campaigns import UnknownCampaign
from senddock.campaigns.recipients import page as recipient_page

Conn = psycopg.Connection[dict[str, Any]]


def like(term: str | None) -> str | None:
    """A LIKE pattern matching `term` anywhere, or None for no search."""
    if term is None or not term.strip():
        return None
    escaped = term.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


SUBSCRIBERS = """
SELECT s.id, s.email, s.name, s.status, s.attributes, s.created_at, s.updated_at,
       count(*) OVER () AS full_count
FROM subscribers s
WHERE (%(q)s::text IS NULL OR s.email ILIKE %(q)s OR s.name ILIKE %(q)s)
  AND (%(list)s::text IS NULL OR EXISTS (
        SELECT 1 FROM list_memberships m JOIN lists l ON l.id = m.list_id
        WHERE m.subscriber_id = s.id AND l.name = %(list)s))
ORDER BY s.id
LIMIT %(limit)s OFFSET %(offset)s
"""


def _total(rows: list[dict[str, Any]], count: Any) -> tuple[list[dict[str, Any]], int]:
    """Rows without their window count, and the total (counted again past the last page)."""
    if rows:
        return rows, int(rows[0].pop("full_count"))
    return rows, int(count())


def subscribers_page(
    conn: Conn, q: str | None, list_name: str | None, page: int, per_page: int
) -> tuple[list[dict[str, Any]], int]:
    """One page of subscribers (optionally matching `q`, on `list_name`) and the total."""
    params = {
        "q": like(q),
        "list": list_name,
        "limit": per_page,
        "offset": (page - 1) * per_page,
    }
    rows = conn.execute(SUBSCRIBERS, params).fetchall()
    for r in rows[1:]:
        r.pop("full_count", None)

    def count() -> int:
        params.update(limit=1, offset=0)
        first = conn.execute(SUBSCRIBERS, params).fetchone()
        return int(first["full_count"]) if first else 0

    return _total(rows, count)


def subscriber_email(conn: Conn, subscriber_id: int) -> str | None:
    row = conn.execute("SELECT email FROM subscribers WHERE id = %s", (subscriber_id,)).fetchone()
    return str(row["email"]) if row else None


CAMPAIGNS = """
SELECT c.id, c.name, c.status, c.subject, c.from_addr, c.send_at, c.schedule_error,
       c.broadcast_id, c.created_at,
       coalesce((SELECT array_agg(l.name ORDER BY l.name) FROM campaign_lists cl
                 JOIN lists l ON l.id = cl.list_id WHERE cl.campaign_id = c.id), '{}') AS lists,
       coalesce(b.total, 0) AS total,
       (SELECT count(*) FROM broadcast_jobs j
        WHERE j.broadcast_id = c.broadcast_id AND j.status = 'sent') AS sent,
       (SELECT count(*) FROM broadcast_jobs j
        WHERE j.broadcast_id = c.broadcast_id AND j.status = 'failed') AS failed,
       count(*) OVER () AS full_count
FROM campaigns c LEFT JOIN broadcasts b ON b.id = c.broadcast_id
WHERE (%(status)s::text IS NULL OR c.status = %(status)s)
ORDER BY c.id DESC
LIMIT %(limit)s OFFSET %(offset)s
"""


def campaigns_page(
    conn: Conn, status: str | None, page: int, per_page: int
) -> tuple[list[dict[str, Any]], int]:
    """One page of campaigns, newest first, with sent and failed counts."""
    params: dict[str, Any] = {
        "status": status,
        "limit": per_page,
        "offset": (page - 1) * per_page,
    }
    rows = conn.execute(CAMPAIGNS, params).fetchall()
    for r in rows[1:]:
        r.pop("full_count", None)

    def count() -> int:
        params.update(limit=1, offset=0)
        first = conn.execute(CAMPAIGNS, params).fetchone()
        return int(first["full_count"]) if first else 0

    return _total(rows, count)


def recipients_page(
    conn: Conn, campaign_id: int, status: str | None, q: str | None, page: int, per_page: int
) -> tuple[list[dict[str, Any]], int]:
    """One page of a campaign's recipients with their outcome; none before it is sent.

    `status` is a job status (sent, failed, …) or a failure reason (bounced, exhausted, …).
    """
    row = conn.execute(
        "SELECT broadcast_id FROM campaigns WHERE id = %s", (campaign_id,)
    ).fetchone()
    if row is None:
        raise UnknownCampaign(f"no campaign with id {campaign_id}")
    if row["broadcast_id"] is None:
        return [], 0
    bid, pattern = row["broadcast_id"], like(q)
    rows = recipient_page(conn, bid, status, pattern, per_page, (page - 1) * per_page, True)
    for r in rows[1:]:
        r.pop("full_count", None)

    def count() -> int:
        first = recipient_page(conn, bid, status, pattern, 1, 0, True)
        return int(first[0]["full_count"]) if first else 0

    return _total(rows, count)
