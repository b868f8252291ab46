"""A campaign's audience: its lists narrowed by its segment or its own filter, and its count.

The filter is read when the campaign is sent and fixed on its broadcast (every chunk of the
enqueue narrows by that text); before that, `preview_count` says how many it would reach now.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from senddock.audience import segments
from senddock.campaigns.campaigns import UnknownCampaign
from senddock.db import sql

QUERIES = sql.load(__package__, "audience.sql")

Conn = psycopg.Connection[dict[str, Any]]


@dataclass(frozen=True)
class Audience:
    """What narrows a campaign's lists: `filter` (None: everyone), from `segment` if named."""

    filter: str | None
    segment: str | None


def audience(conn: Conn, campaign_id: int) -> Audience:
    """Campaign `campaign_id`'s filter: the broadcast's once sent, else its own or its segment's."""
    row = conn.execute(QUERIES["campaign_filter"], {"c": campaign_id}).fetchone()
    if row is None:
        raise UnknownCampaign(f"no campaign with id {campaign_id}")
    if row["broadcast_id"] is not None:
        return Audience(row["sent_filter"], row["segment_name"])
    text = row["segment_filter"] if row["segment_id"] is not None else row["audience_filter"]
    return Audience(text, row["segment_name"])


def list_ids(conn: Conn, campaign_id: int) -> list[int]:
    """The ids of the lists campaign `campaign_id` sends to."""
    rows = conn.execute(QUERIES["campaign_list_ids"], {"c": campaign_id}).fetchall()
    return [int(r["list_id"]) for r in rows]


def preview_count(conn: Conn, campaign_id: int) -> int:
    """How many would receive campaign `campaign_id` if it were sent now."""
    who = audience(conn, campaign_id)
    return segments.count(conn, who.filter, list_ids(conn, campaign_id))
