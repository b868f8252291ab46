"""Every campaign at a glance (`campaign list`) and one campaign's every field (`campaign show`)."""

from __future__ import annotations

from typing import Any

import psycopg

from senddock.campaigns.campaigns import UnknownCampaign
from senddock.db import sql
from senddock.queue.counts import Counts, counts_of, shown_status

Conn = psycopg.Connection[dict[str, Any]]

QUERIES = sql.load(__package__, "listing.sql")


def all_campaigns(conn: Conn, archived: bool = False) -> list[dict[str, Any]]:
    """Every campaign not archived (`archived`: every archived one), newest first: id, name,
    status, state (what a person reads: queue.counts.shown_status), created, send_at and its
    counts."""
    with conn.transaction():
        conn.execute(QUERIES["snapshot"])
        rows = conn.execute(QUERIES["list"], {"archived": archived}).fetchall()
        counts = counts_of(conn, [int(r["broadcast_id"]) for r in rows if r["broadcast_id"]])
    none = Counts()
    for r in rows:
        of = counts.get(r.pop("broadcast_id"), none)
        r.update(_ints(of), state=shown_status(r["status"], of))
    return rows


def show(conn: Conn, campaign_id: int) -> dict[str, Any]:
    """Every field of a campaign but its bodies, whose sizes (bytes, UTF-8) stand for them."""
    row = conn.execute(QUERIES["show"], (campaign_id,)).fetchone()
    if row is None:
        raise UnknownCampaign(f"no campaign with id {campaign_id}")
    return {**row, "lists": list(row["lists"])}


def _ints(counts: Counts) -> dict[str, int]:
    return {k: getattr(counts, k) for k in ("total", "sent", "failed", "cancelled")}
