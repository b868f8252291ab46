"""Broadcast(): send a campaign, and nothing else: the policy around the queue's enqueue.

`broadcast()` is one short transaction: it checks the campaign may be sent (a draft; a
cancelled one is not sent again; sending twice answers with its one broadcast), then the queue
layer creates the broadcast, fixes who its recipients are (subscribers up to the highest id now,
members of the campaign's lists now), enqueues the first small chunk of jobs so sending starts
at once, and it returns. Workers enqueue the rest with `queue.enqueue_chunk`, each chunk one
set-based transaction that inserts its jobs and advances the cursor together (invariant 7; see
senddock/queue/jobs.sql, enqueue). A broadcast is not finished while it is still being enqueued
(jobs.sql, finish). A campaign's segment or filter (campaigns/audience.py) is fixed on its
broadcast when it starts; every chunk narrows by it, compiled by audience/segment_filter.py.
"""

from __future__ import annotations

from typing import Any

import psycopg

from senddock import queue
from senddock.audience.segment_filter import narrow
from senddock.campaigns.audience import audience
from senddock.campaigns.campaigns import CampaignError, UnknownCampaign
from senddock.queue import CHUNK, FIRST_CHUNK, PARTS, Chunk

__all__ = [
    "CHUNK",
    "FIRST_CHUNK",
    "PARTS",
    "NothingToSend",
    "broadcast",
    "enqueue_all",
    "enqueue_chunk",
]

Conn = psycopg.Connection[dict[str, Any]]


def enqueue_chunk(conn: Conn, broadcast_id: int | None = None, size: int = CHUNK) -> Chunk | None:
    """The queue's enqueue_chunk, with the segment language to narrow a filtered broadcast."""
    return queue.enqueue_chunk(conn, broadcast_id, size, narrow)


def enqueue_all(conn: Conn, broadcast_id: int | None = None, size: int = CHUNK) -> int:
    """The queue's enqueue_all, with the segment language to narrow a filtered broadcast."""
    return queue.enqueue_all(conn, broadcast_id, size, narrow)


class NothingToSend(CampaignError):
    """The campaign's list has no one to send to."""


def broadcast(conn: Conn, campaign_id: int) -> tuple[int, int, bool]:
    """Start sending campaign `campaign_id`: (broadcast id, jobs enqueued so far, created now).

    Idempotent: a campaign has one broadcast. Returns after the first small chunk; workers
    enqueue the rest (`campaign status` shows the progress).
    """
    with conn.transaction():
        c = queue.lock_campaign(conn, campaign_id)
        if c is None:
            raise UnknownCampaign(f"no campaign with id {campaign_id}")
        if c.broadcast_id is not None:
            if c.status == "cancelled":
                raise CampaignError(
                    f"campaign {campaign_id} is cancelled (broadcast {c.broadcast_id}):"
                    " nothing more of it will be sent"
                )
            return c.broadcast_id, queue.broadcast_total(conn, c.broadcast_id), False
        if c.status != "draft":
            raise CampaignError(f"campaign {campaign_id} is {c.status}, not a draft")
        who = audience(conn, campaign_id).filter
        started = queue.start_broadcast(conn, c, FIRST_CHUNK, who, narrow)
        chunk = started.chunk
        if chunk is None:  # we created it in this transaction: it cannot be locked elsewhere
            raise CampaignError(f"campaign {campaign_id}: could not start its broadcast")
        if chunk.jobs == 0 and not queue.anyone_left(
            conn, campaign_id, chunk.after_id, started.last_id, who, narrow
        ):
            whom = " that matches its filter" if who else ""
            raise NothingToSend(
                f"campaign {campaign_id}: its list has no confirmed, unsuppressed subscriber" + whom
            )
    return chunk.broadcast_id, chunk.jobs, True
