"""The scheduler: enqueue every draft campaign whose send_at has come.

Safe with any number of schedulers on any number of hosts: each due campaign is locked with
SKIP LOCKED and enqueued in the same transaction, which ends its `draft` status, so exactly
one scheduler enqueues it (and Broadcast() is idempotent besides).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import psycopg

from senddock import queue
from senddock.campaigns.broadcast import NothingToSend, broadcast
from senddock.campaigns.campaigns import CampaignError, UnknownCampaign
from senddock.db import connect, sql

log = logging.getLogger("senddock.scheduler")

Conn = psycopg.Connection[dict[str, Any]]
QUERIES = sql.load(__package__, "scheduler.sql")


def schedule(conn: Conn, campaign_id: int, at: datetime | None) -> None:
    """Send a draft campaign at `at` (None: unschedule). `at` must carry a time zone."""
    if at is not None and at.tzinfo is None:
        raise CampaignError(
            "the send time needs a time zone (e.g. 2026-06-01T09:00+02:00)", field="at"
        )
    with conn.transaction():
        c = queue.lock_campaign(conn, campaign_id)
        if c is None:
            raise UnknownCampaign(f"no campaign with id {campaign_id}")
        if c.status != "draft":
            raise CampaignError(f"campaign {campaign_id} is {c.status}: only drafts wait")
        queue.schedule_draft(conn, campaign_id, at)


class SendTimeInPast(CampaignError):
    """A send time a person gave that has already come: it would send at once."""


def refuse_past(conn: Conn, at: datetime | None) -> None:
    """SendTimeInPast if `at` is not ahead of the database's clock (the scheduler's clock).

    The scheduler sends a due draft at its next pass, so a time in the past (a wrong year, a
    zone left out) would send now, unasked; `campaign send` is the way to send now.
    """
    if at is None:
        return
    row = conn.execute(QUERIES["in_past"], (at,)).fetchone()
    if row is not None and row["past"]:
        raise SendTimeInPast(
            f"the send time {at.isoformat()} is in the past; to send now, use `campaign send`"
        )


def run_due(conn: Conn, limit: int = 20) -> list[int]:
    """Enqueue the due campaigns this scheduler could lock; their ids."""
    done: list[int] = []
    with conn.transaction():
        for cid in queue.due_drafts(conn, limit):
            try:
                broadcast(conn, cid)  # a savepoint inside our transaction; the lock is ours
                done.append(cid)
            except NothingToSend as exc:
                log.warning("scheduled campaign %s not sent: %s", cid, exc)
                queue.give_up_schedule(conn, cid, str(exc))
    return done


def tick(url: str) -> list[int]:
    """One scheduler pass on a connection of its own (for a worker or `serve` loop)."""
    with connect(url) as conn:
        return run_due(conn)
