"""What a bounce or complaint that comes back after the relay's 250 does to the queue.

`apply` runs once per finding, in the transaction that records it (bounces.store), and only
for a finding matched to a job of ours (unmatched ones suppress nobody):

    kind       suppression                                          job record, counter
    hard       the address, reason bounce (status + diagnostic)     first report wins;
    soft       only at the `SoftLimit`-th distinct message in its   'later:<kind>' + 1, once
               window, reason bounce ("3 soft bounces in 30 days")  per job and kind
    policy     nobody (the relay or the receiver refused us)
    complaint  the address, reason complaint

The job's record and the suppression keep the finding's reason too (userunknown, feedback,
mailboxfull for the soft report that reached the limit, …: bounces.classify). An address
suppressed already keeps its first reason. The job may be gone (retention): then
the suppression names the subscriber's address and the counters count all the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import psycopg

from senddock.config import Settings
from senddock.db import sql

QUERIES = sql.load(__package__, "bounces.sql")

Conn = psycopg.Connection[dict[str, Any]]

# What a suppression's detail keeps of a report (the suppression list shows it).
DETAIL_CHARS = 300


class Finding(Protocol):
    """What `apply` reads of a finding (bounces.parse.Finding)."""

    @property
    def kind(self) -> str: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def status(self) -> str | None: ...
    @property
    def diagnostic(self) -> str | None: ...


class Match(Protocol):
    """The job a finding is about (bounces.store.Match)."""

    @property
    def broadcast_id(self) -> int: ...
    @property
    def subscriber_id(self) -> int: ...


@dataclass(frozen=True)
class SoftLimit:
    """`count` soft bounces (distinct messages) within `days` suppress an address."""

    count: int
    days: int

    @classmethod
    def of(cls, settings: Settings) -> SoftLimit:
        return cls(settings.soft_bounce_limit, settings.soft_bounce_days)

    @classmethod
    def default(cls) -> SoftLimit:
        """The Settings defaults, without reading the environment."""
        fields = Settings.model_fields
        return cls(fields["soft_bounce_limit"].default, fields["soft_bounce_days"].default)


@dataclass(frozen=True)
class Effect:
    """What one finding did: the address it suppressed (None: nobody new), whether it counted."""

    suppressed: str | None
    counted: bool


def detail(finding: Finding) -> str:
    """A hard bounce's suppression detail: its status and diagnostic, truncated."""
    text = " ".join(p for p in (finding.status, finding.diagnostic) if p)
    text = " ".join(text.split()) or f"{finding.kind} report"
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 1] + "…"


def apply(conn: Conn, finding: Finding, match: Match | None, soft: SoftLimit) -> Effect:
    """The effects of one recorded finding (see the module); call in its transaction."""
    if match is None:
        return Effect(None, False)
    job = {"b": match.broadcast_id, "s": match.subscriber_id, "kind": finding.kind}
    conn.execute(QUERIES["mark_job"], {**job, "reason": finding.reason})
    counted = conn.execute(QUERIES["count_effect"], job).rowcount == 1
    suppressed_as = why = None
    if finding.kind == "hard":
        suppressed_as, why = "bounce", detail(finding)
    elif finding.kind == "complaint":
        suppressed_as, why = "complaint", detail(finding)
    elif finding.kind == "soft":
        days = {"s": match.subscriber_id, "days": soft.days}
        found = conn.execute(QUERIES["soft_reports"], days).fetchone()
        if found is not None and int(found["n"]) >= soft.count:
            suppressed_as, why = "bounce", f"{soft.count} soft bounces in {soft.days} days"
    if suppressed_as is None:
        return Effect(None, counted)
    params = {**job, "why": suppressed_as, "detail": why, "reason": finding.reason}
    added = conn.execute(QUERIES["suppress"], params).fetchone()
    if added is None:
        return Effect(None, counted)  # suppressed already: its first reason stays
    if suppressed_as == "bounce":
        conn.execute(QUERIES["tag_bounced"], {"email": added["email"]})
    return Effect(str(added["email"]), counted)
