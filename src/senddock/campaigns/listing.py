"""Every campaign at a glance (`campaign list`) and one campaign's every field (`campaign show`)."""

from __future__ import annotations

from typing import Any

import psycopg

from senddock.campaigns.campaigns import UnknownCampaign
from senddock.queue.counts import Counts, counts_of

Conn = psycopg.Connection[dict[str, Any]]

# Every campaign, newest first; its counts are the queue's (queue/counts.py).
LIST = """
SELECT c.id, c.name, c.status, c.created_at, c.send_at, c.broadcast_id
FROM campaigns c
ORDER BY c.id DESC
"""

SHOW = """
SELECT c.id, c.name, c.status, c.subject, c.from_addr, c.reply_to,
       coalesce((SELECT array_agg(l.name ORDER BY l.name) FROM campaign_lists cl
                 JOIN lists l ON l.id = cl.list_id WHERE cl.campaign_id = c.id), '{}') AS lists,
       c.send_at, c.schedule_error, c.broadcast_id, c.created_at, c.updated_at,
       coalesce(octet_length(c.text_body), 0) AS text_bytes,
       coalesce(octet_length(c.html_body), 0) AS html_bytes
FROM campaigns c WHERE c.id = %s
"""


def all_campaigns(conn: Conn) -> list[dict[str, Any]]:
    """Every campaign, newest first: id, name, status, created, send_at and its counts."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        rows = conn.execute(LIST).fetchall()
        counts = counts_of(conn, [int(r["broadcast_id"]) for r in rows if r["broadcast_id"]])
    none = Counts()
    for r in rows:
        r.update(_ints(counts.get(r.pop("broadcast_id"), none)))
    return rows


def show(conn: Conn, campaign_id: int) -> dict[str, Any]:
    """Every field of a campaign but its bodies, whose sizes (bytes, UTF-8) stand for them."""
    row = conn.execute(SHOW, (campaign_id,)).fetchone()
    if row is None:
        raise UnknownCampaign(f"no campaign with id {campaign_id}")
    return {**row, "lists": list(row["lists"])}


def _ints(counts: Counts) -> dict[str, int]:
    return {k: getattr(counts, k) for k in ("total", "sent", "failed", "cancelled")}
