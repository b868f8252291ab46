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

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import psycopg

from senddock import queue
from senddock.campaigns.campaigns import CampaignError, UnknownCampaign
from senddock.db import connect
from senddock.queue import (
    CHUNK,
    FIRST_CHUNK,
    NOTIFY_CHANNEL,
    PARTS,
    Chunk,
    enqueue_all,
    enqueue_chunk,
)

__all__ = [
    "CHUNK",
    "FIRST_CHUNK",
    "PARTS",
    "Chunk",
    "NothingToSend",
    "broadcast",
    "enqueue_all",
    "enqueue_chunk",
    "run_enqueuer",
]

log = logging.getLogger("senddock.enqueue")

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


async def run_enqueuer(
    url: str,
    stopping: asyncio.Event,
    woke: Callable[[], None],
    size: int = CHUNK,
    idle: float = 1.0,
) -> None:
    """A worker's enqueue task: carry every broadcast being enqueued to its end, chunk by chunk.

    Runs the chunks on a connection of its own in a thread (each commits on its own, so
    stopping between two loses nothing); waits for a NOTIFY, or `idle` seconds, when there is
    nothing to do. `woke` is called after each chunk that inserted jobs (senders wake up).
    """
    conn: Conn | None = None
    delay = 0.05
    while not stopping.is_set():
        try:
            if conn is None or conn.closed:
                conn = await asyncio.to_thread(_listening, url)
            chunk = await asyncio.to_thread(enqueue_chunk, conn, None, size)
            delay = 0.05
            if chunk is None:
                await asyncio.to_thread(_wait_notify, conn, idle)
            elif chunk.jobs:
                woke()
        except psycopg.OperationalError as exc:
            log.warning("enqueue interrupted (%s); retrying", " ".join(str(exc).split()))
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
            conn = None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
    if conn is not None:
        conn.close()


def _listening(url: str) -> Conn:
    conn = connect(url)
    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
    return conn


def _wait_notify(conn: Conn, timeout: float) -> None:
    for _ in conn.notifies(timeout=timeout, stop_after=1):
        pass
