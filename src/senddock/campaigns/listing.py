"""Every campaign at a glance (`campaign list`) and one campaign's every field (`campaign show`)."""

from __future__ import annotations

from typing import Any

import psycopg

from senddock.campaigns.campaigns import UnknownCampaign

Conn = psycopg.Connection[dict[str, Any]]

# Counts from the jobs (the index that holds each job's status), or the frozen ones once
# retention deleted the jobs; a draft has none.
LIST = """
SELECT c.id, c.name, c.status, c.created_at, c.send_at,
       coalesce((b.final_counts->>'total')::bigint, k.total, 0) AS total,
       coalesce((b.final_counts->>'sent')::bigint, k.sent, 0) AS sent,
       coalesce((b.final_counts->>'failed')::bigint, k.failed, 0) AS failed,
       coalesce((b.final_counts->>'cancelled')::bigint, k.cancelled, 0) AS cancelled
FROM campaigns c
LEFT JOIN broadcasts b ON b.id = c.broadcast_id
LEFT JOIN LATERAL (
    SELECT count(*) AS total,
           count(*) FILTER (WHERE j.status = 'sent') AS sent,
           count(*) FILTER (WHERE j.status = 'failed') AS failed,
           count(*) FILTER (WHERE j.status = 'cancelled') AS cancelled
    FROM broadcast_jobs j WHERE j.broadcast_id = c.broadcast_id
) k ON b.final_counts IS NULL
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
    return [{**r, **_ints(r)} for r in conn.execute(LIST).fetchall()]


def show(conn: Conn, campaign_id: int) -> dict[str, Any]:
    """Every field of a campaign but its bodies, whose sizes (bytes, UTF-8) stand for them."""
    row = conn.execute(SHOW, (campaign_id,)).fetchone()
    if row is None:
        raise UnknownCampaign(f"no campaign with id {campaign_id}")
    return {**row, "lists": list(row["lists"])}


def _ints(row: dict[str, Any]) -> dict[str, int]:
    return {k: int(row[k]) for k in ("total", "sent", "failed", "cancelled")}
