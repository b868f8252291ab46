"""Broadcast(): enqueue a campaign, and nothing else. One set-based transaction (invariant 7)."""

from __future__ import annotations

import email.utils
import secrets
from typing import Any

import psycopg

from senddock.campaigns.campaigns import CampaignError, UnknownCampaign
from senddock.delivery.queue import NOTIFY_CHANNEL

LOCK_CAMPAIGN = """
SELECT id, list_id, from_addr, status, broadcast_id FROM campaigns WHERE id = %s FOR UPDATE
"""
NEW_BROADCAST = "INSERT INTO broadcasts (campaign_id, total) VALUES (%s, 0) RETURNING id"
# One job per distinct (one subscriber per address), active, non-suppressed address that is
# confirmed on any of the campaign's lists. The Message-ID is fixed here, so every attempt of
# the job carries the same one (invariant 9).
ENQUEUE = """
INSERT INTO broadcast_jobs (broadcast_id, subscriber_id, email, message_id)
SELECT %(b)s::bigint, s.id, s.email,
       format('<sd.%%s.%%s.%%s@%%s>', %(b)s::bigint, s.id, %(token)s::text, %(domain)s::text)
FROM subscribers s
WHERE s.status = 'active'
  AND EXISTS (SELECT 1 FROM list_memberships m
              JOIN campaign_lists cl ON cl.list_id = m.list_id AND cl.campaign_id = %(c)s::bigint
              WHERE m.subscriber_id = s.id AND m.status = 'confirmed')
  AND NOT EXISTS (SELECT 1 FROM suppressions x WHERE lower(x.email) = lower(s.email))
ON CONFLICT (broadcast_id, subscriber_id) DO NOTHING
"""
LINK = """
WITH b AS (UPDATE broadcasts SET total = %(total)s WHERE id = %(b)s)
UPDATE campaigns SET broadcast_id = %(b)s, status = 'sending', updated_at = now() WHERE id = %(c)s
"""


class NothingToSend(CampaignError):
    """The campaign's list has no one to send to."""


def broadcast(conn: psycopg.Connection[dict[str, Any]], campaign_id: int) -> tuple[int, int, bool]:
    """Enqueue campaign `campaign_id`: (broadcast id, jobs, created now). Idempotent."""
    with conn.transaction():
        row = conn.execute(LOCK_CAMPAIGN, (campaign_id,)).fetchone()
        if row is None:
            raise UnknownCampaign(f"no campaign with id {campaign_id}")
        if row["broadcast_id"] is not None:
            known = conn.execute(
                "SELECT total FROM broadcasts WHERE id = %s", (row["broadcast_id"],)
            ).fetchone()
            return int(row["broadcast_id"]), int(known["total"]) if known else 0, False
        if row["status"] != "draft":
            raise CampaignError(f"campaign {campaign_id} is {row['status']}, not a draft")
        b = conn.execute(NEW_BROADCAST, (campaign_id,)).fetchone()
        assert b is not None
        bid = int(b["id"])
        domain = email.utils.parseaddr(str(row["from_addr"]))[1].rsplit("@", 1)[-1]
        params = {"b": bid, "c": campaign_id, "token": secrets.token_hex(4), "domain": domain}
        total = conn.execute(ENQUEUE, params).rowcount
        if total == 0:
            raise NothingToSend(
                f"campaign {campaign_id}: its list has no confirmed, unsuppressed subscriber"
            )
        conn.execute(LINK, {"total": total, "b": bid, "c": campaign_id})
        conn.execute(f"NOTIFY {NOTIFY_CHANNEL}")
    # The claim's plan depends on the table's statistics, and autovacuum may take a minute to
    # notice this many new rows: with stale ones it scans the whole broadcast per claim.
    conn.execute("ANALYZE broadcast_jobs")
    return bid, total, True
