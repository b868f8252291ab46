"""Every campaign's unconfirmed jobs at once, and one action for all that remain (issue 41).

A job is `unconfirmed` when its final dot may have gone and no outcome was recorded
(docs/design.md): nothing sends it again on its own, a person resends or confirms it. A
campaign's page shows its own; after a crash that killed workers of several broadcasts, a
person should not have to open each one. `waiting` reads them all in one snapshot: the
campaigns (newest first) with their exact counts (the queue's, queue/counts.py), the first
jobs of each with when their dot went, to which relay and what each source said at the last
reconcile. `total` is the same count for the dashboard's navigation.

The one action, `resend_seen`, resends only what the person saw. The page carries how many
it offered to resend and a fingerprint of their job ids; the action reads the set again in
its own transaction and, if either differs (a job turned unconfirmed since, one was settled
elsewhere, a campaign was cancelled), resends nobody. Otherwise it resends those jobs by id,
campaign by campaign through the campaign's own policy (recipients.resend_unconfirmed), in
one transaction: a job settled between the check and its update makes the whole action roll
back rather than resend the rest of a set that is no longer the one seen. `reconcile_all`
asks the relay about every such campaign, one `reconcile` each.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import psycopg

from senddock import queue
from senddock.campaigns import reconcile
from senddock.campaigns.campaigns import CampaignError
from senddock.campaigns.recipients import resend_unconfirmed
from senddock.config import Settings
from senddock.db import sql
from senddock.errors import Conflict
from senddock.queue.counts import counts_of, shown_status

QUERIES = sql.load(__package__, "unconfirmed.sql")

Conn = psycopg.Connection[dict[str, Any]]

# Jobs a page lists per campaign; the counts stay exact beyond it (one crash leaves at most one
# a sender session: a few hundred is already a fleet of them).
SHOWN_JOBS = 200
# A campaign whose unconfirmed jobs a person may send again (a cancelled one's never go again).
RESENDABLE = ("sending", "paused")


@dataclass(frozen=True)
class WaitingJob:
    """One unconfirmed job: when its final dot was about to go, to which relay, from which
    worker, and what each source said of it at the last reconcile (none before any)."""

    id: int
    email: str
    message_id: str
    worker_id: int | None
    dot_at: datetime | None
    relay: str | None
    said: tuple[queue.Note, ...] = ()


@dataclass(frozen=True)
class WaitingCampaign:
    """A campaign with unconfirmed jobs: its exact count, and the first `SHOWN_JOBS` of them
    (oldest dot first)."""

    id: int
    name: str
    subject: str
    status: str
    state: str
    broadcast_id: int
    unconfirmed: int
    jobs: tuple[WaitingJob, ...]

    SHOWN: ClassVar[tuple[str, ...]] = ("more", "resendable")

    @property
    def more(self) -> int:
        """Unconfirmed jobs beyond those listed."""
        return max(self.unconfirmed - len(self.jobs), 0)

    @property
    def resendable(self) -> bool:
        """Whether the one action resends its jobs (sending or paused; never cancelled)."""
        return self.status in RESENDABLE


@dataclass(frozen=True)
class Waiting:
    """Every campaign with unconfirmed jobs, newest first, read in one snapshot; how many
    jobs the one action would resend (`resendable`) and the fingerprint of their ids, which
    its form carries back."""

    campaigns: tuple[WaitingCampaign, ...]
    resendable: int
    fingerprint: str

    SHOWN: ClassVar[tuple[str, ...]] = ("total",)

    @property
    def total(self) -> int:
        """Unconfirmed jobs in all, resendable or not."""
        return sum(c.unconfirmed for c in self.campaigns)


@dataclass(frozen=True)
class Resent:
    """What the one action did: recipients queued again, over how many campaigns, and how
    many of them wait for their paused campaign to be resumed."""

    recipients: int
    campaigns: int
    paused: int


@dataclass(frozen=True)
class _Resendable:
    """The resendable jobs' ids by campaign (ascending), and their campaign's status."""

    ids: Mapping[int, tuple[int, ...]]
    paused: frozenset[int]

    @property
    def count(self) -> int:
        return sum(len(ids) for ids in self.ids.values())

    @property
    def fingerprint(self) -> str:
        """Names the set, not its size: the same count with one job settled and another
        unconfirmed since is another set."""
        listed = ",".join(str(i) for i in sorted(i for ids in self.ids.values() for i in ids))
        return hashlib.sha256(listed.encode("ascii")).hexdigest()[:32]


def _resendable(conn: Conn) -> _Resendable:
    rows = conn.execute(QUERIES["resendable"]).fetchall()
    return _Resendable(
        {int(r["campaign_id"]): tuple(int(i) for i in r["ids"]) for r in rows},
        frozenset(int(r["campaign_id"]) for r in rows if r["status"] == "paused"),
    )


def waiting(conn: Conn, shown: int = SHOWN_JOBS) -> Waiting:
    """Every campaign with unconfirmed jobs, newest first, each with its exact count and its
    first `shown` jobs with what each source said, in one snapshot."""
    found: list[WaitingCampaign] = []
    with conn.transaction():
        conn.execute(QUERIES["snapshot"])
        rows = conn.execute(QUERIES["waiting"]).fetchall()
        counts = counts_of(conn, [int(r["broadcast_id"]) for r in rows])
        for r in rows:
            bid = int(r["broadcast_id"])
            said = reconcile.notes(conn, bid)  # issue 41: each source's word, by job
            jobs = tuple(
                WaitingJob(
                    u.id,
                    u.email,
                    u.message_id,
                    u.worker_id,
                    u.dot_at,
                    u.relay,
                    tuple(said.get(u.id, ())),
                )
                for u in queue.unconfirmed_jobs(conn, bid, limit=shown)
            )
            of = counts[bid]
            found.append(
                WaitingCampaign(
                    int(r["id"]),
                    r["name"],
                    r["subject"],
                    r["status"],
                    shown_status(r["status"], of),
                    bid,
                    of.unconfirmed,
                    jobs,
                )
            )
        seen = _resendable(conn)
    return Waiting(tuple(found), seen.count, seen.fingerprint)


def total(conn: Conn) -> int:
    """Unconfirmed jobs in all (the navigation's badge): one empty index probe when none."""
    with conn.transaction():
        conn.execute(QUERIES["snapshot"])
        rows = conn.execute(QUERIES["waiting"]).fetchall()
        counts = counts_of(conn, [int(r["broadcast_id"]) for r in rows])
    return sum(c.unconfirmed for c in counts.values())


def resend_seen(conn: Conn, seen: int, fingerprint: str) -> Resent:
    """Send again every resendable unconfirmed job, only if they are still the `seen` jobs
    of `fingerprint` the page showed: Conflict, and nobody resent, if the set changed."""
    with conn.transaction():
        now = _resendable(conn)
        if (now.count, now.fingerprint) != (seen, fingerprint):
            raise Conflict(
                f"The unconfirmed recipients changed since the page was shown ({seen} to"
                f" resend then, {now.count} now): nobody was sent again. Look again."
            )
        # Ascending campaign ids: two of these actions lock the campaigns in one order.
        for campaign_id, ids in now.ids.items():
            try:
                resent = resend_unconfirmed(conn, campaign_id, ids)
            except CampaignError as exc:  # cancelled since the set was read
                raise _changed(campaign_id, exc.message) from exc
            if resent != len(ids):  # one of them settled since the set was read
                raise _changed(campaign_id, "one of its recipients was settled")
    paused = sum(len(now.ids[c]) for c in now.paused)
    return Resent(now.count, len(now.ids), paused)


def _changed(campaign_id: int, why: str) -> Conflict:
    return Conflict(
        f"Campaign {campaign_id} changed while its unconfirmed recipients were being resent"
        f" ({why}): nobody was sent again. Look again."
    )


def reconcile_all(conn: Conn, settings: Settings) -> list[reconcile.Reconciled]:
    """Ask the configured sources about every campaign with unconfirmed jobs (newest first),
    one `reconcile.reconcile` each, applied as it goes. Invalid (before any is asked) when
    no source is configured."""
    asked: list[reconcile.Reconciled] = []
    for c in conn.execute(QUERIES["waiting"]).fetchall():
        cid = int(c["id"])
        sources = reconcile.sources_from(settings, (), reconcile.sender_of(conn, cid))
        asked.append(reconcile.reconcile(conn, cid, sources))
    return asked
