"""Broadcast(): send a campaign, and nothing else: the policy around the queue's enqueue.

`broadcast()` is one short transaction: it checks the campaign may be sent (a draft; a
cancelled one is not sent again; sending twice answers with its one broadcast), then the queue
layer creates the broadcast, fixes who its recipients are (subscribers up to the highest id now,
members of the campaign's lists now), enqueues the first small chunk of jobs so sending starts
at once, and it returns. Workers enqueue the rest with `queue.enqueue_chunk`, each chunk one
set-based transaction that inserts its jobs and advances the cursor together (invariant 7; see
senddock/queue/jobs.sql, enqueue). A broadcast is not finished while it is still being enqueued
(jobs.sql, finish).
"""

from __future__ import annotations

from typing import Any

import psycopg

from senddock import queue
from senddock.campaigns.campaigns import CampaignError, UnknownCampaign
from senddock.queue import CHUNK, FIRST_CHUNK, PARTS, enqueue_all, enqueue_chunk

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
        started = queue.start_broadcast(conn, c, FIRST_CHUNK)
        chunk = started.chunk
        if chunk is None:  # we created it in this transaction: it cannot be locked elsewhere
            raise CampaignError(f"campaign {campaign_id}: could not start its broadcast")
        if chunk.jobs == 0 and not queue.anyone_left(
            conn, campaign_id, chunk.after_id, started.last_id
        ):
            raise NothingToSend(
                f"campaign {campaign_id}: its list has no confirmed, unsuppressed subscriber"
            )
    return chunk.broadcast_id, chunk.jobs, True
