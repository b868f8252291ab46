"""Who got what: every recipient of a campaign with its outcome, and re-queueing the failed."""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

import psycopg

from senddock import queue
from senddock.audience import cells
from senddock.campaigns.campaigns import FAILURES, JOB_STATUSES, CampaignError, UnknownCampaign
from senddock.db import sql

COLUMNS = (
    "email",
    "status",
    "failure",
    "attempts",
    "sent_at",
    "message_id",
    "last_code",
    "last_enhanced",
    "last_reply",
    "settled_by",
    "settled_at",
)

QUERIES = sql.load(__package__, "recipients.sql")

Conn = psycopg.Connection[dict[str, Any]]


def _broadcast_of(conn: Conn, campaign_id: int) -> int:
    row = conn.execute(QUERIES["broadcast_of"], (campaign_id,)).fetchone()
    if row is None:
        raise UnknownCampaign(f"no campaign with id {campaign_id}")
    if row["broadcast_id"] is None:
        raise CampaignError(f"campaign {campaign_id} has not been sent: it has no recipients yet")
    return int(row["broadcast_id"])


def filtered(broadcast_id: int, status: str | None, pattern: str | None) -> dict[str, Any]:
    """The parameters of recipients.sql's statements, by name as psycopg takes them (not a
    result): `status` is a job status or a failure reason (else no filter), `pattern` an
    ILIKE pattern or None."""
    return {
        "b": broadcast_id,
        "status": status if status in JOB_STATUSES else None,
        "failure": status if status in FAILURES else None,
        "q": pattern,
    }


@dataclass(frozen=True)
class RecipientRow:
    """One recipient of a campaign with its outcome: its job's status (and failure), attempts,
    when it went, its Message-ID, its last reply (campaigns.reply_line reads it) and, once it
    was unconfirmed, who settled it and when (issue 41). COLUMNS are its CSV columns."""

    email: str
    status: str
    failure: str | None
    attempts: int
    sent_at: datetime | None
    message_id: str
    last_code: int | None
    last_enhanced: str | None
    last_reply: str | None
    last_stage: str | None
    settled_by: str | None
    settled_at: datetime | None


def page(
    conn: Conn,
    broadcast_id: int,
    status: str | None,
    pattern: str | None,
    limit: int,
    offset: int,
) -> list[RecipientRow]:
    """One page of the recipients (`status` and `pattern` as in `filtered`)."""
    params = {**filtered(broadcast_id, status, pattern), "limit": limit, "offset": offset}
    return [RecipientRow(**r) for r in conn.execute(QUERIES["recipients_page"], params)]


def counted_page(
    conn: Conn,
    broadcast_id: int,
    status: str | None,
    pattern: str | None,
    limit: int,
    offset: int,
) -> tuple[list[RecipientRow], int]:
    """One page of the recipients and how many match in all, counted in the page's own
    snapshot (past the last page, by a page of one from the start)."""
    params = {**filtered(broadcast_id, status, pattern), "limit": limit, "offset": offset}
    rows = conn.execute(QUERIES["recipients_page_counted"], params).fetchall()
    if not rows and offset:
        first = {**params, "limit": 1, "offset": 0}
        total = [r["full_count"] for r in conn.execute(QUERIES["recipients_page_counted"], first)]
    else:
        total = [r["full_count"] for r in rows[:1]]
    found = [RecipientRow(**{k: v for k, v in r.items() if k != "full_count"}) for r in rows]
    return found, int(total[0]) if total else 0


def recipients(conn: Conn, campaign_id: int, status: str | None = None) -> Iterator[RecipientRow]:
    """Every recipient of the campaign with its outcome, streamed (a server-side cursor).

    `status` is a job status (sent, failed, …) or a failure reason (bounced, exhausted, …).
    """
    if status is not None and status not in JOB_STATUSES + FAILURES:
        choices = ", ".join(JOB_STATUSES + FAILURES)
        raise CampaignError(f"status must be one of {choices}; got {status!r}")
    params = filtered(_broadcast_of(conn, campaign_id), status, None)
    with conn.transaction(), conn.cursor(name="senddock_recipients") as cur:
        cur.itersize = 2000
        cur.execute(QUERIES["recipients"], params)
        for r in cur:
            yield RecipientRow(**r)


def write_csv(conn: Conn, campaign_id: int, status: str | None, out: TextIO) -> int:
    """Every recipient (of `status`, as `recipients`) as CSV with a header row, its cells safe
    to open in a spreadsheet (audience/cells.py); how many rows."""
    w = csv.writer(out)
    w.writerow(COLUMNS)
    n = 0
    for r in recipients(conn, campaign_id, status):
        times = {"sent_at": r.sent_at, "settled_at": r.settled_at}
        shown = {k: t.isoformat() if t else "" for k, t in times.items()}
        w.writerow(cells.row(shown[k] if k in shown else getattr(r, k) for k in COLUMNS))
        n += 1
    return n


def retry_failed(conn: Conn, campaign_id: int) -> int:
    """Re-queue the failed, non-suppressed recipients of a campaign; how many.

    A finished broadcast runs again and its campaign goes back to `sending` in the same
    transaction as the jobs, so workers claim them at once and the counts stay exact. A paused
    campaign stays paused: the jobs wait for `campaign resume`.
    """
    with conn.transaction():
        c = queue.lock_campaign(conn, campaign_id)
        if c is None:
            raise UnknownCampaign(f"no campaign with id {campaign_id}")
        if c.broadcast_id is None:
            raise CampaignError(f"campaign {campaign_id} has not been sent yet")
        if c.status == "cancelled":
            raise CampaignError(f"campaign {campaign_id} is cancelled")
        purged_at = queue.bump_generation(conn, c.broadcast_id)
        if purged_at is not None:
            raise CampaignError(
                f"campaign {campaign_id}: its recipients were deleted by retention on"
                f" {purged_at:%Y-%m-%d} (SENDDOCK_RETENTION_DAYS); nothing to retry"
            )
        n = queue.requeue_failed(conn, c.broadcast_id)
    # A finish that read the queue before this commit cannot finish the broadcast afterwards:
    # it checks the generation bumped above (jobs.sql, finish).
    return n


def _unconfirmed_action(
    conn: Conn, campaign_id: int, verb: str, ids: Sequence[int] | None = None
) -> int:
    """Resend (`resend`) or confirm (`confirm`) a campaign's unconfirmed recipients (only the
    jobs `ids`, when given: the ones the relay's log shows, say); how many."""
    with conn.transaction():
        c = queue.lock_campaign(conn, campaign_id)
        if c is None:
            raise UnknownCampaign(f"no campaign with id {campaign_id}")
        if c.broadcast_id is None:
            raise CampaignError(f"campaign {campaign_id} has not been sent yet")
        if verb == "resend":
            if c.status == "cancelled":
                raise CampaignError(f"campaign {campaign_id} is cancelled; confirm instead")
            return queue.resend_unconfirmed(conn, c.broadcast_id, _ids(ids))
        n = queue.confirm(conn, c.broadcast_id, _ids(ids))
    if n:
        with conn.transaction():
            queue.finish_sync(conn)  # nothing else unfinished: the campaign is sent now
    return n


def _ids(ids: Sequence[int] | None) -> list[int] | None:
    return None if ids is None else [int(i) for i in ids]


def resend_unconfirmed(conn: Conn, campaign_id: int, ids: Sequence[int] | None = None) -> int:
    """Send again the campaign's unconfirmed recipients (their final dot went, no outcome was
    recorded), or those of the jobs `ids`, with the same Message-ID; how many. Issue 23: a
    person's choice, never ours."""
    return _unconfirmed_action(conn, campaign_id, "resend", ids)


def confirm(conn: Conn, campaign_id: int, ids: Sequence[int] | None = None) -> int:
    """Mark the campaign's unconfirmed recipients (or those of the jobs `ids`) sent, once the
    relay's log shows they went; how many."""
    return _unconfirmed_action(conn, campaign_id, "confirm", ids)
