"""What a bounce or complaint that came after the relay's 250 does to the queue.

`apply` runs in the transaction that records the finding (bounces/store.py), so a finding is
either recorded with its effect or not at all. For a matched finding:

    hard       suppress (reason bounce, detail: status and diagnostic), tag the subscriber
    complaint  suppress (reason complaint)
    soft       the `limit`th soft bounce of one address within `days` suppresses it (bounce)
    policy     suppress nobody (the fault is ours or the relay's, not the address's)

and every kind marks the sent job (`bounced_at`, `bounce_kind`: the first, never moved) and
counts `later:<kind>` for the broadcast. The fence is one `bounce_effects` row per
(broadcast, subscriber, kind): two DSNs about one job count it once. Keyed by broadcast and
subscriber, so a bounce after retention deleted the job still suppresses and counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from senddock.db import sql

QUERIES = sql.load(__package__, "bounces.sql")

Conn = psycopg.Connection[dict[str, Any]]


@dataclass(frozen=True)
class SoftLimit:
    """N soft bounces of one address within `days` suppress it."""

    limit: int = 3
    days: int = 30


DEFAULT_SOFT_LIMIT = SoftLimit()


@dataclass(frozen=True)
class Effect:
    """What one finding did: whether it was new for its job, and whether it suppressed."""

    new: bool
    suppressed: bool = False


def _detail(status: str | None, diagnostic: str | None) -> str:
    return " ".join(p for p in (status, diagnostic) if p) or "bounced after delivery"


def apply(
    conn: Conn,
    finding_id: int | None,
    broadcast_id: int,
    subscriber_id: int,
    kind: str,
    recipient: str | None,
    status: str | None,
    diagnostic: str | None,
    soft: SoftLimit,
) -> Effect:
    """The effect of one matched finding (see the module), inside the caller's transaction."""
    row = conn.execute(QUERIES["address"], {"b": broadcast_id, "s": subscriber_id}).fetchone()
    email = (row["email"] if row else None) or recipient
    if not email:
        return Effect(False)  # nobody to suppress or count: a job and subscriber both gone
    params = {"b": broadcast_id, "s": subscriber_id, "kind": kind, "email": email}
    if conn.execute(QUERIES["effect"], {**params, "finding": finding_id}).fetchone() is None:
        return Effect(False)
    conn.execute(QUERIES["mark_job"], params)
    conn.execute(QUERIES["count_later"], params)
    reason: str | None = None
    detail = _detail(status, diagnostic)
    if kind == "hard":
        reason = "bounce"
    elif kind == "complaint":
        reason, detail = "complaint", diagnostic or "complaint"
    elif kind == "soft":
        n = conn.execute(QUERIES["soft_recent"], {"email": email, "days": soft.days}).fetchone()
        if n is not None and int(n["n"]) >= soft.limit:
            reason = "bounce"
            detail = f"soft bounce limit: {n['n']} in {soft.days} days; last {detail}"
    if reason is None:
        return Effect(True)
    suppress = {"email": email, "reason": reason, "b": broadcast_id, "detail": detail}
    suppressed = conn.execute(QUERIES["suppress"], suppress).rowcount == 1
    if reason == "bounce":
        conn.execute(QUERIES["tag_bounced"], {"email": email})
    return Effect(True, suppressed)
