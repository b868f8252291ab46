"""Reconcile: ask the relay, where it can tell, what became of a campaign's unconfirmed jobs.

Issue 41. After a crash a job is `unconfirmed` (docs/design.md): its final dot may have gone,
and nothing sends it again on its own. Each source the operator configured is asked about
each such job (campaigns/relay_log.py: the relay's log; campaigns/provider_search.py: a
provider's search API) and says one of:

    accepted       the relay took it                  -> confirm: sent, settled_by the source
    not accepted   it provably never did (a log that  -> resend_unconfirmed: queued again,
                   covers the job's whole window)        same Message-ID, settled_by the source
    not seen       a search found nothing (no proof)  -> stays for a person
    cannot tell    with why                           -> stays for a person

One `accepted` wins over any other word (a copy went: sending again would be the duplicate
the state exists to prevent). What each source said of the jobs that stay is kept
(reconcile_notes, 0029) for the dashboard, which offers one action for them all. The sources
are asked outside any transaction (a network call, a log file); the verdicts land in one
transaction under the campaign's lock, each fenced on `status = 'unconfirmed'`, so a late
outcome or a person's decision in between wins. Delivery events at the webhook intake confirm
a job unattended (web/webhooks.py, queue confirm_delivered): not here.
"""

from __future__ import annotations

import email.utils
import ipaddress
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from typing import Any, Protocol
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import psycopg

from senddock import queue
from senddock.campaigns.campaigns import CampaignError, UnknownCampaign
from senddock.campaigns.provider_search import Asked, Mailgun, Postmark, SendGrid
from senddock.campaigns.relay_log import RelayLog, Word, judge, read
from senddock.config import Settings
from senddock.db import sql
from senddock.errors import Invalid
from senddock.queue import Unconfirmed

Conn = psycopg.Connection[dict[str, Any]]
QUERIES = sql.load(__package__, "reconcile.sql")

# Unconfirmed jobs one run asks about (at most one a session a crash: a few hundred is many).
MAX_JOBS = 10_000
LOG_SOURCE = "relay-log"


class Provider(Protocol):
    """A provider's search: one word about one job."""

    @property
    def source(self) -> str: ...

    def ask(self, job: Asked, slack: timedelta) -> Word: ...


@dataclass(frozen=True)
class Sources:
    """What the operator configured: the relay's log files, providers to ask."""

    logs: tuple[str, ...] = ()
    zone: tzinfo | None = None
    log_relay: str | None = None
    slack: timedelta = timedelta(seconds=30)
    providers: tuple[Provider, ...] = ()

    @property
    def any(self) -> bool:
        return bool(self.logs or self.providers)


def _base_url(name: str, url: str) -> str:
    """A provider's base URL: https, or http to a loopback address."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    loopback = False
    try:
        loopback = ipaddress.ip_address(parts.hostname or "").is_loopback
    except ValueError:
        loopback = parts.hostname == "localhost"
    if parts.scheme == "http" and loopback:
        return url
    raise Invalid(f"SENDDOCK_{name} must be an https URL (or http to a loopback address)")


def sources_from(settings: Settings, logs: Sequence[str] = (), sender: str = "") -> Sources:
    """The sources the settings turn on; `logs` (the command's --log) replace the setting's."""
    paths = tuple(logs) or tuple(p.strip() for p in settings.reconcile_logs.split(",") if p.strip())
    zone: tzinfo | None = None
    if settings.reconcile_log_tz:
        try:
            zone = ZoneInfo(settings.reconcile_log_tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise Invalid(
                f"SENDDOCK_RECONCILE_LOG_TZ: unknown time zone {settings.reconcile_log_tz!r}"
            ) from None
    providers: list[Provider] = []
    if settings.mailgun_api_key is not None:
        if not settings.mailgun_domain:
            raise Invalid("SENDDOCK_MAILGUN_API_KEY needs SENDDOCK_MAILGUN_DOMAIN")
        base = _base_url("MAILGUN_API_URL", settings.mailgun_api_url)
        key = settings.mailgun_api_key.get_secret_value()
        providers.append(Mailgun(base, settings.mailgun_domain, key))
    if settings.postmark_server_token is not None:
        base = _base_url("POSTMARK_API_URL", settings.postmark_api_url)
        token = settings.postmark_server_token.get_secret_value()
        providers.append(Postmark(base, token, sender))
    if settings.sendgrid_api_key is not None:
        base = _base_url("SENDGRID_API_URL", settings.sendgrid_api_url)
        providers.append(SendGrid(base, settings.sendgrid_api_key.get_secret_value(), sender))
    slack = timedelta(seconds=settings.reconcile_slack)
    return Sources(paths, zone, settings.reconcile_log_relay, slack, tuple(providers))


@dataclass(frozen=True)
class Verdict:
    """One job, what each source said, and what became of it: confirmed | resent | held."""

    job: Unconfirmed
    words: tuple[Word, ...]
    outcome: str
    by: str | None = None


@dataclass
class Reconciled:
    """A reconcile's result, job by job."""

    campaign_id: int
    verdicts: list[Verdict] = field(default_factory=list)
    applied: bool = True

    def count(self, outcome: str) -> int:
        return sum(1 for v in self.verdicts if v.outcome == outcome)


def _decide(words: Sequence[Word]) -> tuple[str, str | None]:
    for w in words:
        if w.said == "accepted":
            return "confirmed", w.source
    for w in words:
        if w.said == "not accepted":
            return "resent", w.source
    return "held", None


def _log_word(
    log: RelayLog | None, sources: Sources, job: Unconfirmed, problem: str | None
) -> Word:
    if problem is not None or log is None:
        return Word(LOG_SOURCE, "cannot tell", problem or "no log")
    if sources.log_relay and job.relay != sources.log_relay:
        why = f"the job went to {job.relay or '?'}, the log is {sources.log_relay}'s"
        return Word(LOG_SOURCE, "cannot tell", why)
    return judge(log, LOG_SOURCE, job.message_id, job.claimed_at, job.dot_at, sources.slack)


def _campaign(conn: Conn, campaign_id: int) -> queue.Campaign:
    c = queue.lock_campaign(conn, campaign_id)
    if c is None:
        raise UnknownCampaign(f"no campaign with id {campaign_id}")
    if c.broadcast_id is None:
        raise CampaignError(f"campaign {campaign_id} has not been sent yet")
    return c


def sender_of(conn: Conn, campaign_id: int) -> str:
    """The campaign's From address (what Postmark and SendGrid are searched by)."""
    with conn.transaction():
        return email.utils.parseaddr(_campaign(conn, campaign_id).from_addr)[1]


def reconcile(conn: Conn, campaign_id: int, sources: Sources, *, apply: bool = True) -> Reconciled:
    """Ask every source about the campaign's unconfirmed jobs; with `apply`, confirm those a
    source saw accepted, queue again those a source proves were not, and keep what each
    source said of the rest. Invalid when no source is configured or a log cannot be read."""
    if not sources.any:
        raise Invalid(
            "no source to ask: set SENDDOCK_RECONCILE_LOGS (or give --log), or a provider's"
            " search (SENDDOCK_MAILGUN_API_KEY, SENDDOCK_POSTMARK_SERVER_TOKEN,"
            " SENDDOCK_SENDGRID_API_KEY)"
        )
    with conn.transaction():
        c = _campaign(conn, campaign_id)
        assert c.broadcast_id is not None
        held = queue.unconfirmed_jobs(conn, c.broadcast_id, limit=MAX_JOBS)
        row = conn.execute(QUERIES["now"]).fetchone()
        assert row is not None
        now: datetime = row["now"]
    result = Reconciled(campaign_id, applied=apply)
    if not held:
        return result
    log: RelayLog | None = None
    problem: str | None = None
    if sources.logs:
        zone = sources.zone or datetime.now().astimezone().tzinfo or ZoneInfo("UTC")
        try:
            log = read(sources.logs, now, zone)
        except OSError as exc:
            raise Invalid(f"cannot read the relay's log: {exc}") from None
    for job in held:
        words: list[Word] = []
        if sources.logs:
            words.append(_log_word(log, sources, job, problem))
        asked = Asked(job.email, job.message_id, job.claimed_at, job.dot_at)
        words += [p.ask(asked, sources.slack) for p in sources.providers]
        outcome, by = _decide(words)
        result.verdicts.append(Verdict(job, tuple(words), outcome, by))
    if apply:
        _apply(conn, campaign_id, result)
    return result


def _apply(conn: Conn, campaign_id: int, result: Reconciled) -> None:
    confirm: dict[str, list[int]] = defaultdict(list)
    resend: dict[str, list[int]] = defaultdict(list)
    for v in result.verdicts:
        if v.by is not None:
            (confirm if v.outcome == "confirmed" else resend)[v.by].append(v.job.id)
    with conn.transaction():
        c = _campaign(conn, campaign_id)
        assert c.broadcast_id is not None
        for by, ids in confirm.items():
            queue.confirm(conn, c.broadcast_id, ids, by=by)
        if c.status != "cancelled":  # a cancelled campaign's jobs are never sent again
            for by, ids in resend.items():
                queue.resend_unconfirmed(conn, c.broadcast_id, ids, by=by)
        notes = [
            queue.Note(v.job.id, w.source, w.said, w.detail)
            for v in result.verdicts
            for w in v.words
        ]
        queue.note_reconcile(conn, c.broadcast_id, notes)
    if confirm:
        with conn.transaction():
            queue.finish_sync(conn)  # nothing else unfinished: the campaign is sent now


def notes(conn: Conn, broadcast_id: int) -> dict[int, list[queue.Note]]:
    """What each source said of the broadcast's jobs still unconfirmed, by job."""
    by_job: dict[int, list[queue.Note]] = defaultdict(list)
    for n in queue.reconcile_notes(conn, broadcast_id):
        by_job[n.job_id].append(n)
    return dict(by_job)
