"""The one count of a broadcast's jobs: `Counts`, read by `counts_of` (invariant 8).

Every surface that shows counts reads them here: `campaign status` (text and --json), the API
(list and detail), the dashboard (list, page, live updates), /metrics and the cleaner's freeze.

The counts are counters kept by statement-level triggers on broadcast_jobs (migration 0010), in
the same transaction as each transition, so every writer (enqueue, claim, group commit, rescue,
cancel, retry-failed) counts without knowing it. Pending and sending are not counters: sending
is read from the small partial index of held rows, pending is the rest of the total. A read is
a few rows per broadcast whatever its size, and retention (which deletes jobs, not counters)
leaves it as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, get_args

import psycopg
from psycopg import AsyncConnection

from senddock.db import sql

QUERIES = sql.load(__package__, "counts.sql")

Conn = psycopg.Connection[dict[str, Any]]
AsyncConn = AsyncConnection[dict[str, Any]]

# A job's status, and for a failed one the reason it failed.
JobState = Literal["pending", "sending", "retry", "sent", "failed", "cancelled", "unconfirmed"]
Failure = Literal["bounced", "suppressed", "exhausted", "rejected"]
JOB_STATUSES: tuple[str, ...] = get_args(JobState)
FAILURES: tuple[str, ...] = get_args(Failure)
# Gmail's and Yahoo's bulk-sender rule: spam complaints below 0.3 % of the messages sent.
COMPLAINT_LIMIT = 0.003


@dataclass(frozen=True)
class Counts:
    """A broadcast's jobs: the total, one count per status and one per failure reason."""

    total: int = 0
    pending: int = 0
    sending: int = 0
    retry: int = 0
    sent: int = 0
    failed: int = 0
    cancelled: int = 0
    # The final dot went and no outcome was recorded (issue 23): a person resends or confirms.
    unconfirmed: int = 0
    bounced: int = 0
    suppressed: int = 0
    exhausted: int = 0
    rejected: int = 0
    # Reports that came back after the relay's 250 (queue/bounces.py), each job once per kind:
    # hard bounces, soft ones, policy refusals and spam complaints.
    bounced_later: int = 0
    soft_later: int = 0
    policy_later: int = 0
    complaints: int = 0
    # Jobs not in a final state (pending, sending, retry, unconfirmed): the one definition of
    # unfinished, senddock_unfinished in SQL (migration 0026), which `finish` reads too.
    unfinished: int = 0

    @property
    def finished(self) -> bool:
        """Nothing is left for a worker or a person: every job sent, failed or cancelled."""
        return self.unfinished == 0

    @property
    def waiting_for_decision(self) -> bool:
        """Drained but for unconfirmed jobs: only a person (confirm or resend) can end it."""
        return self.unconfirmed > 0 and self.unfinished == self.unconfirmed

    @property
    def done(self) -> int:
        """Jobs in a final state (sent, failed, cancelled)."""
        return self.total - self.unfinished

    @property
    def complaint_rate(self) -> float:
        """Complaints per message sent (0 before any is sent); compare with COMPLAINT_LIMIT."""
        return self.complaints / self.sent if self.sent else 0.0

    @property
    def retryable(self) -> int:
        """Failed jobs that retry-failed can send again: not bounced nor suppressed (those
        addresses are suppressed, and stay failed)."""
        return self.exhausted + self.rejected

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def __add__(self, other: Counts) -> Counts:
        return Counts(**{k: v + getattr(other, k) for k, v in self.as_dict().items()})


COUNT_KEYS: tuple[str, ...] = tuple(f.name for f in fields(Counts))

# The state a person reads for a campaign that has drained but for unconfirmed jobs: only they
# can end it (confirm or resend), so it is not "sending 99 %".
WAITING = "waiting for a decision"


def shown_status(status: str, counts: Counts) -> str:
    """A campaign's status as every surface shows it: its stored status, except a sending one
    whose only unfinished jobs are unconfirmed, which waits for a decision."""
    return WAITING if status == "sending" and counts.waiting_for_decision else status


def percent_done(status: str, counts: Counts) -> int:
    """How far a campaign is, as every progress bar shows it: whole percent of its jobs in a
    final state, 100 only when all are. Of a cancelled campaign, the share that went out (sent
    or failed) before the cancel: its cancelled jobs are final, but a bar full of them read as
    "100 % done"."""
    shown = counts.sent + counts.failed if status == "cancelled" else counts.done
    if not counts.total:
        return 100 if status == "sent" else 0
    return shown * 100 // counts.total


# The counter of each later report's kind: broadcast_counts state 'later:<kind>'.
LATER: dict[str, str] = {
    "hard": "bounced_later",
    "soft": "soft_later",
    "policy": "policy_later",
    "complaint": "complaints",
}


def _counts(states: dict[str, int], unfinished: int, sending: int) -> Counts:
    """Counts from the counted states of one broadcast (or of all), its unfinished jobs (the
    counters weighed by senddock_unfinished_weight) and its held jobs."""
    failed = {k[len("failed:") :]: n for k, n in states.items() if k.startswith("failed:")}
    total = states.get("total", 0)
    retry, sent, cancelled, unconfirmed = (
        states.get(k, 0) for k in ("retry", "sent", "cancelled", "unconfirmed")
    )
    all_failed = sum(failed.values())
    return Counts(
        total=total,
        # Not counted (a claim would lock the counter row): the unfinished less those counted.
        pending=unfinished - sending - retry - unconfirmed,
        sending=sending,
        retry=retry,
        sent=sent,
        failed=all_failed,
        cancelled=cancelled,
        unconfirmed=unconfirmed,
        **{reason: failed.get(reason, 0) for reason in FAILURES},
        **{key: states.get(f"later:{kind}", 0) for kind, key in LATER.items()},
        unfinished=unfinished,
    )


def counts_of(conn: Conn, broadcast_ids: Sequence[int]) -> dict[int, Counts]:
    """The counts of each of these broadcasts (zero for one with no job).

    Two statements; call it inside a REPEATABLE READ transaction when the counts must agree with
    other reads (campaigns.status does)."""
    ids = sorted(set(broadcast_ids))
    if not ids:
        return {}
    counters = conn.execute(QUERIES["counters"], {"ids": ids}).fetchall()
    held = conn.execute(QUERIES["sending"], {"ids": ids}).fetchall()
    return _by_broadcast(ids, counters, held)


async def counts_of_async(conn: AsyncConn, broadcast_ids: Sequence[int]) -> dict[int, Counts]:
    """`counts_of` on an async connection (the cleaner's)."""
    ids = sorted(set(broadcast_ids))
    if not ids:
        return {}
    counters = await (await conn.execute(QUERIES["counters"], {"ids": ids})).fetchall()
    held = await (await conn.execute(QUERIES["sending"], {"ids": ids})).fetchall()
    return _by_broadcast(ids, counters, held)


def _by_broadcast(
    ids: list[int], counters: list[dict[str, Any]], held: list[dict[str, Any]]
) -> dict[int, Counts]:
    states: dict[int, dict[str, int]] = {b: {} for b in ids}
    unfinished = dict.fromkeys(ids, 0)
    for row in counters:
        b = int(row["broadcast_id"])
        states[b][str(row["state"])] = int(row["n"])
        unfinished[b] += int(row["n"]) * int(row["weight"])
    sending = {int(r["broadcast_id"]): int(r["n"]) for r in held}
    return {b: _counts(states[b], unfinished[b], sending.get(b, 0)) for b in ids}


def count(conn: Conn, broadcast_id: int | None) -> Counts:
    """One broadcast's counts; all zero for none (a draft has no broadcast)."""
    if broadcast_id is None:
        return Counts()
    return counts_of(conn, [broadcast_id])[broadcast_id]


def all_counts(conn: Conn) -> Counts:
    """The counts of every broadcast together (/metrics), purged ones included."""
    rows = conn.execute(QUERIES["all_counters"]).fetchall()
    states = {str(r["state"]): int(r["n"]) for r in rows}
    unfinished = sum(int(r["n"]) * int(r["weight"]) for r in rows)
    row = conn.execute(QUERIES["all_sending"]).fetchone()
    return _counts(states, unfinished, int(row["n"]) if row else 0)


def bounced_at_send(conn: Conn, campaign_id: int | None = None) -> dict[int, int]:
    """Recipients refused at RCPT as bounces, by campaign (only `campaign_id`'s if given);
    campaigns with none are left out."""
    rows = conn.execute(QUERIES["bounced_at_send"], {"c": campaign_id})
    return {int(r["campaign_id"]): int(r["n"]) for r in rows}


@dataclass(frozen=True)
class Problem:
    """A broadcast's latest problem: the newest retry or failed job with a reply, read live
    (counts.sql last_problem) or from the copy the cleaner froze in `final_counts` as JSON
    (`as_dict`) before a purge."""

    email: str
    status: str
    last_stage: str | None
    last_code: int | None
    last_enhanced: str | None
    last_reply: str | None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Problem:
        """From a row or its frozen JSON copy (any key a frozen copy lacks is None)."""
        found: dict[str, Any] = {f.name: row.get(f.name) for f in fields(cls)}
        return cls(**found)

    def as_dict(self) -> dict[str, Any]:
        """The JSON copy the cleaner freezes."""
        return asdict(self)


def last_problem(conn: Conn, broadcast_id: int) -> Problem | None:
    """The newest retry or failed job of a broadcast that has a reply, or None."""
    row = conn.execute(QUERIES["last_problem"], {"b": broadcast_id}).fetchone()
    return None if row is None else Problem.of(row)


async def last_problem_async(conn: AsyncConn, broadcast_id: int) -> Problem | None:
    """`last_problem` on an async connection (the cleaner freezes it before a purge)."""
    cur = await conn.execute(QUERIES["last_problem"], {"b": broadcast_id})
    row = await cur.fetchone()
    return None if row is None else Problem.of(row)
