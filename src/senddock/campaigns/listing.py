"""Every campaign at a glance (`campaign list`) and one campaign's every field (`campaign show`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from senddock.campaigns.campaigns import UnknownCampaign
from senddock.db import sql
from senddock.queue.counts import Counts, counts_of, percent_done, shown_status

Conn = psycopg.Connection[dict[str, Any]]

QUERIES = sql.load(__package__, "listing.sql")


@dataclass(frozen=True)
class CampaignRow:
    """A campaign in `campaign list`: what it is, when, and its queue's counts."""

    id: int
    name: str
    status: str
    created_at: datetime
    send_at: datetime | None
    counts: Counts

    @property
    def state(self) -> str:
        """What a person reads (queue.counts.shown_status)."""
        return shown_status(self.status, self.counts)

    @property
    def percent(self) -> int:
        """Its progress bar (queue.counts.percent_done)."""
        return percent_done(self.status, self.counts)

    def as_dict(self) -> dict[str, Any]:
        """The keys of `campaign list --json`, in their order."""
        c = self.counts
        return {
            "id": self.id,
            "name": self.name,
            "status": self.status,
            "created_at": self.created_at,
            "send_at": self.send_at,
            "total": c.total,
            "sent": c.sent,
            "failed": c.failed,
            "cancelled": c.cancelled,
            "state": self.state,
        }


@dataclass(frozen=True)
class CampaignDetail:
    """Every field of a campaign but its bodies, whose sizes (bytes, UTF-8) stand for them."""

    id: int
    name: str
    status: str
    subject: str
    from_addr: str
    reply_to: str | None
    lists: tuple[str, ...]
    send_at: datetime | None
    schedule_error: str | None
    broadcast_id: int | None
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None
    text_bytes: int
    html_bytes: int
    markdown_bytes: int
    layout: str | None
    segment: str | None
    filter: str | None


def all_campaigns(conn: Conn, archived: bool = False) -> list[CampaignRow]:
    """Every campaign not archived (`archived`: every archived one), newest first, each with
    its counts read in the same snapshot."""
    with conn.transaction():
        conn.execute(QUERIES["snapshot"])
        rows = conn.execute(QUERIES["list"], {"archived": archived}).fetchall()
        counts = counts_of(conn, [int(r["broadcast_id"]) for r in rows if r["broadcast_id"]])
    none = Counts()
    return [
        CampaignRow(
            id=r["id"],
            name=r["name"],
            status=r["status"],
            created_at=r["created_at"],
            send_at=r["send_at"],
            counts=counts.get(r["broadcast_id"], none),
        )
        for r in rows
    ]


def show(conn: Conn, campaign_id: int) -> CampaignDetail:
    """Every field of a campaign but its bodies, whose sizes (bytes, UTF-8) stand for them."""
    row = conn.execute(QUERIES["show"], (campaign_id,)).fetchone()
    if row is None:
        raise UnknownCampaign(f"no campaign with id {campaign_id}")
    return CampaignDetail(**{**row, "lists": tuple(row["lists"])})
