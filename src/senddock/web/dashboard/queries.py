"""The dashboard's own reads: pages of long tables, counts for many campaigns, sends per minute.

Writes go through the service modules (campaigns, audience); this module only reads. Every
statement is parameterized; searches are ILIKE patterns built by views.like().
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import psycopg

from senddock.campaigns.campaigns import COUNT_KEYS, FAILURES

Conn = psycopg.Connection[dict[str, Any]]

# The newest campaigns, a page at a time.
CAMPAIGNS = """
SELECT c.id, c.name, c.status, c.subject, c.created_at, c.broadcast_id, b.pause_reason
FROM campaigns c LEFT JOIN broadcasts b ON b.id = c.broadcast_id
ORDER BY c.id DESC LIMIT %(limit)s OFFSET %(offset)s
"""
# Exact counts of many broadcasts at once, read from the counts index (invariant 8).
COUNTS = """
SELECT broadcast_id, status, failure, count(*)::int AS n
FROM broadcast_jobs WHERE broadcast_id = ANY(%(ids)s::bigint[])
GROUP BY broadcast_id, status, failure
"""
CAMPAIGN = """
SELECT c.id, c.name, c.status, c.subject, c.from_addr, c.reply_to, c.created_at, c.send_at,
       c.broadcast_id, b.created_at AS started_at, b.finished_at,
       array(SELECT l.name FROM campaign_lists cl JOIN lists l ON l.id = cl.list_id
             WHERE cl.campaign_id = c.id ORDER BY l.name) AS lists
FROM campaigns c LEFT JOIN broadcasts b ON b.id = c.broadcast_id WHERE c.id = %(id)s
"""
# Messages the server accepted in the last minute, and the seconds since the first of them
# (or the broadcast's start, if later): the span they were actually sent over (database clock).
RATE = """
SELECT count(*)::int AS n,
       extract(epoch FROM now() - greatest(
           min(sent_at), (SELECT created_at FROM broadcasts WHERE id = %(b)s)))::float8 AS seconds
FROM broadcast_jobs
WHERE broadcast_id = %(b)s AND status = 'sent' AND sent_at > now() - interval '1 minute'
"""
# The shortest span a rate is averaged over: two sends 10 ms apart are not 6,000/min.
RATE_MIN_SECONDS = 5.0
# Sent per minute, the latest `minutes` minutes that had a send, and the database's now.
PER_MINUTE = """
SELECT date_trunc('minute', sent_at) AS minute, count(*)::int AS sent
FROM broadcast_jobs WHERE broadcast_id = %(b)s AND status = 'sent'
GROUP BY 1 ORDER BY 1 DESC LIMIT %(minutes)s
"""
NOW_MINUTE = "SELECT date_trunc('minute', now()) AS now"
SUBSCRIBERS = """
SELECT s.id, s.email, s.name, s.status, s.created_at,
       coalesce((SELECT string_agg(l.name || CASE WHEN m.status = 'confirmed' THEN ''
                                             ELSE ' (' || m.status || ')' END,
                                   ', ' ORDER BY l.name)
                 FROM list_memberships m JOIN lists l ON l.id = m.list_id
                 WHERE m.subscriber_id = s.id), '') AS lists,
       EXISTS (SELECT 1 FROM suppressions x WHERE lower(x.email) = lower(s.email)) AS suppressed
FROM subscribers s
WHERE (%(q)s::text IS NULL OR s.email ILIKE %(q)s OR s.name ILIKE %(q)s)
  AND (%(list)s::text IS NULL OR EXISTS (
        SELECT 1 FROM list_memberships m JOIN lists l ON l.id = m.list_id
        WHERE m.subscriber_id = s.id AND l.name = %(list)s))
ORDER BY lower(s.email) LIMIT %(limit)s OFFSET %(offset)s
"""
SUPPRESSIONS = """
SELECT email, reason, created_at, coalesce(detail, '') AS detail
FROM suppressions
WHERE (%(q)s::text IS NULL OR email ILIKE %(q)s)
  AND (%(reason)s::text IS NULL OR reason = %(reason)s)
ORDER BY lower(email) LIMIT %(limit)s OFFSET %(offset)s
"""


def progress(counts: dict[str, Any], status: str) -> dict[str, Any]:
    """Counts plus `done` (jobs in a final state) and `percent` (whole, 100 only when all are).

    Of a cancelled campaign, `percent` is the share that went out (sent or failed) before the
    cancel: its cancelled jobs are final, but a bar full of them read as "100 % done"."""
    total = int(counts.get("total", 0))
    went = int(counts.get("sent", 0)) + int(counts.get("failed", 0))
    done = went + int(counts.get("cancelled", 0))
    shown = went if status == "cancelled" else done
    percent = shown * 100 // total if total else (100 if status == "sent" else 0)
    return {**counts, "done": done, "percent": percent}


def campaigns_page(conn: Conn, limit: int, offset: int) -> list[dict[str, Any]]:
    """A page of campaigns, newest first, each with exact counts and progress."""
    rows = conn.execute(CAMPAIGNS, {"limit": limit, "offset": offset}).fetchall()
    counts = counts_of(conn, [int(r["broadcast_id"]) for r in rows if r["broadcast_id"]])
    return [
        {**r, **progress(counts.get(r["broadcast_id"], dict.fromkeys(COUNT_KEYS, 0)), r["status"])}
        for r in rows
    ]


def counts_of(conn: Conn, broadcast_ids: list[int]) -> dict[int, dict[str, int]]:
    """The same counts as campaigns.status, for many broadcasts in one statement."""
    found: dict[int, dict[str, int]] = {b: dict.fromkeys(COUNT_KEYS, 0) for b in broadcast_ids}
    if not broadcast_ids:
        return found
    for row in conn.execute(COUNTS, {"ids": broadcast_ids}):
        c = found[int(row["broadcast_id"])]
        n = int(row["n"])
        c["total"] += n
        c[row["status"]] += n
        if row["status"] == "failed" and row["failure"] in FAILURES:
            c[row["failure"]] += n
    return found


def campaign(conn: Conn, campaign_id: int) -> dict[str, Any] | None:
    return conn.execute(CAMPAIGN, {"id": campaign_id}).fetchone()


def rate(conn: Conn, broadcast_id: int) -> int:
    """Messages sent a minute: those of the last minute over the time since the first of them
    (at least RATE_MIN_SECONDS), not over the whole minute, which showed 200/min 10 s into a
    1,200/min send."""
    row = conn.execute(RATE, {"b": broadcast_id}).fetchone()
    if row is None or not row["n"]:
        return 0
    seconds = min(max(float(row["seconds"] or 0.0), RATE_MIN_SECONDS), 60.0)
    return round(int(row["n"]) * 60 / seconds)


def per_minute(
    conn: Conn, broadcast_id: int, live: bool, minutes: int = 30
) -> list[tuple[datetime, int]]:
    """Sent per minute, oldest first, with empty minutes filled in.

    The window ends now while the campaign is live, else at its last send; it spans at least
    10 minutes and at most `minutes`.
    """
    rows = conn.execute(PER_MINUTE, {"b": broadcast_id, "minutes": minutes}).fetchall()
    sent = {r["minute"]: int(r["sent"]) for r in rows}
    now = conn.execute(NOW_MINUTE).fetchone()
    if live and now is not None:
        end = now["now"]
    elif sent:
        end = max(sent)
    else:
        return []
    start = min(sent) if sent else end
    span = (end - start) // timedelta(minutes=1) + 1
    span = min(max(span, 10), minutes)
    return [
        (m, sent.get(m, 0)) for m in (end - timedelta(minutes=i) for i in range(span - 1, -1, -1))
    ]


def subscribers_page(
    conn: Conn, q: str | None, list_name: str | None, limit: int, offset: int
) -> list[dict[str, Any]]:
    params = {"q": q, "list": list_name, "limit": limit, "offset": offset}
    return conn.execute(SUBSCRIBERS, params).fetchall()


def suppressions_page(
    conn: Conn, q: str | None, reason: str | None, limit: int, offset: int
) -> list[dict[str, Any]]:
    params = {"q": q, "reason": reason, "limit": limit, "offset": offset}
    return conn.execute(SUPPRESSIONS, params).fetchall()
