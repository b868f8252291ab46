"""Campaign records, their exact counts, pause, resume and cancel: the policy.

Who may pause, resume or cancel what, and the messages, are here; the transitions themselves
are the queue layer's (senddock/queue/jobs.py), called with the campaign locked.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any, Literal, Protocol

import psycopg

from senddock.audience.addresses import normalize
from senddock.audience.lists import find_list
from senddock.audience.segment_filter import check as check_filter
from senddock.audience.segments import find as find_segment
from senddock.campaigns.layouts import Chosen, checked_bodies
from senddock.campaigns.template_check import check_names
from senddock.campaigns.workers import live_workers
from senddock.config import Settings
from senddock.db import sql
from senddock.errors import Conflict, Invalid, NotFound
from senddock.messages import check_header, compile_message
from senddock.messages.tracking import Track
from senddock.queue import (
    Campaign,
    Note,
    Unconfirmed,
    finish_sync,
    lock_campaign,
    reconcile_notes,
    unconfirmed_jobs,
)
from senddock.queue import cancel as cancel_in_queue
from senddock.queue import set_running as set_running_in_queue
from senddock.queue.counts import COUNT_KEYS as COUNT_KEYS  # re-exported for the web
from senddock.queue.counts import FAILURES as FAILURES
from senddock.queue.counts import JOB_STATUSES as JOB_STATUSES
from senddock.queue.counts import (
    WAITING,
    Counts,
    Failure,
    JobState,
    Problem,
    count,
    last_problem,
    percent_done,
    shown_status,
)
from senddock.tracking import Engagement, engagement

QUERIES = sql.load(__package__, "campaigns.sql")
# The lease `status` judges workers live by when its caller has no settings at hand.
LEASE: float = Settings.model_fields["lease_seconds"].default


class CampaignError(Conflict, ValueError):
    """A campaign operation that cannot be done as asked (409 unless a subclass says)."""


class UnknownCampaign(NotFound, CampaignError, LookupError):
    """No campaign with that id (404)."""


def track_for(given: str | None, settings: Settings) -> str:
    """What a new or edited campaign tracks, as stored: `given` (a person's words), else
    SENDDOCK_TRACK; anonymous whenever SENDDOCK_TRACK_ANONYMOUS is set (the operator's floor,
    whatever was asked). Invalid, naming `track`, for words it does not know."""
    track = Track.parse(settings.track if given is None else given)
    if settings.track_anonymous:
        track = replace(track, anonymous=True)
    return track.stored


def create_campaign(
    conn: psycopg.Connection[dict[str, Any]],
    *,
    name: str,
    list_name: str | Sequence[str],
    subject: str,
    from_addr: str,
    text_body: str | None,
    html_body: str | None = None,
    reply_to: str | None = None,
    send_at: datetime | None = None,
    segment: str | None = None,
    audience_filter: str | None = None,
    layout: str | None = None,
    markdown_body: str | None = None,
    track: str | None = None,
) -> int:
    """Check everything that could fail mid-broadcast now, then store a draft; its id.

    Without a text body, the text part is derived from the HTML. With `send_at` (time zone
    required) the scheduler enqueues it then. Several lists: each address gets one message.
    A saved `segment` (by name) or an `audience_filter` of its own narrows the lists.
    `layout` names the layout (the default one when None, none for "none"); a Markdown body
    stands for the HTML one (campaigns/layouts.py, messages/layout.py). `track`: what it
    tracks ('opens,clicks', 'none', ...: messages/tracking.py); the caller passes the
    SENDDOCK_TRACK default when a person gave none.
    """
    tracked = Track.parse(track).stored  # Invalid naming `track`
    if segment and audience_filter:
        raise Invalid("give a segment or a filter, not both", field="filter")
    segment_id = find_segment(conn, segment).id if segment else None
    own_filter = check_filter(audience_filter) if audience_filter else None
    if send_at is not None and send_at.tzinfo is None:
        raise CampaignError(
            "the send time needs a time zone (e.g. 2026-06-01T09:00+02:00)", field="send_at"
        )
    list_ids = lists_of(conn, list_name)
    chosen = check_fields(
        conn,
        name,
        list_ids,
        subject,
        from_addr,
        text_body,
        html_body,
        reply_to,
        layout=layout,
        markdown_body=markdown_body,
    )
    with conn.transaction():
        cid = _insert(
            conn,
            name,
            list_ids,
            subject,
            from_addr,
            reply_to,
            chosen.text_body,
            html_body,
            send_at,
            tracked,
        )
        conn.execute(
            QUERIES["set_layout"],
            {"id": cid, "layout": chosen.layout_id, "markdown": markdown_body or None},
        )
        if segment_id is not None or own_filter is not None:
            conn.execute(
                QUERIES["set_audience"], {"c": cid, "segment": segment_id, "filter": own_filter}
            )
    return cid


def lists_of(conn: psycopg.Connection[dict[str, Any]], list_name: str | Sequence[str]) -> list[int]:
    """The ids of the lists named (UnknownList for one that does not exist; at least one)."""
    names = [list_name] if isinstance(list_name, str) else list(dict.fromkeys(list_name))
    if not names:
        raise CampaignError("a campaign needs at least one list", field="lists")
    return [find_list(conn, n) for n in names]  # UnknownList


def check_fields(
    conn: psycopg.Connection[dict[str, Any]],
    name: str,
    list_ids: Sequence[int],
    subject: str,
    from_addr: str,
    text_body: str | None,
    html_body: str | None,
    reply_to: str | None,
    *,
    layout: str | int | None = "none",
    markdown_body: str | None = None,
) -> Chosen:
    """Every check a campaign's fields pass before they are stored (create and edit alike),
    each failure one line naming its field; the bodies as checked, inside `layout` (a name,
    None for the default one, "none" for none, or the id an edited campaign keeps)."""
    check_header("campaign name", name, field="name")
    # TemplateProblem / HeaderError, with the part and line; then with its layout.
    chosen = checked_bodies(conn, layout, subject, from_addr, text_body, html_body, markdown_body)
    compile_message(subject, from_addr, chosen.text, chosen.html, reply_to=reply_to)
    normalize(email.utils.parseaddr(from_addr)[1], field="from_addr")  # InvalidAddress
    if reply_to:
        normalize(email.utils.parseaddr(reply_to)[1], field="reply_to")
    # A misspelt name would render empty for everyone: TemplateProblem with part and line.
    check_names(conn, list_ids, subject, chosen.text, chosen.html)
    return chosen


def _insert(
    conn: psycopg.Connection[dict[str, Any]],
    name: str,
    list_ids: list[int],
    subject: str,
    from_addr: str,
    reply_to: str | None,
    text_body: str | None,
    html_body: str | None,
    send_at: datetime | None,
    track: str = "",
) -> int:
    row = conn.execute(
        QUERIES["insert_campaign"],
        (
            name,
            subject,
            from_addr,
            reply_to or None,
            text_body or None,
            html_body or None,
            send_at,
            track,
        ),
    ).fetchone()
    assert row is not None
    conn.execute(
        QUERIES["insert_campaign_lists"],
        (row["id"], list_ids),
    )
    return int(row["id"])


# `campaign status` lists this many unconfirmed recipients (the count is exact, always).
UNCONFIRMED_SHOWN = 20

# A job's status, and for a failed one the reason it failed: what a recipient can show.
JobStatus = Literal[JobState, Failure]


@dataclass(frozen=True)
class CampaignStatus:
    """A campaign's state and exact counts, read from the queue in one snapshot: the one
    object `campaign status` (text and --json), the API and the dashboard show. What they show
    beyond the stored fields (the state word, done, percent) is a property here."""

    id: int
    name: str
    status: str
    # It has work for a worker and no worker is live (heartbeat within the lease).
    no_live_worker: bool
    broadcast_id: int | None
    counts: Counts
    pause_reason: str | None
    last_sender_fault: str | None
    # Still being enqueued in the background: `total` is the jobs enqueued so far.
    enqueue_done: bool
    # A draft's scheduled time, and why the scheduler gave up on it.
    send_at: datetime | None
    schedule_error: str | None
    last_problem: str | None
    worker_deaths: int
    last_worker_death: str | None
    # Issue 23: recipients whose final dot went with no outcome recorded (the first few:
    # when, to which relay, from which worker), for a person to resend or confirm.
    unconfirmed_jobs: tuple[Unconfirmed, ...]
    # Issue 41: what each source said of those jobs at the last reconcile, by job id.
    said: Mapping[int, tuple[Note, ...]] = field(default_factory=dict)
    # Issue 37: what it tracks ('', 'opens', 'clicks', 'opens,clicks') and its figures.
    track: str = ""
    engagement: Engagement = field(default_factory=Engagement)

    def words(self, job_id: int) -> list[dict[str, str]]:
        """What each source said of one unconfirmed job, as every surface shows it."""
        return [
            {"source": n.source, "said": n.said, "detail": n.detail}
            for n in self.said.get(job_id, ())
        ]

    @property
    def state(self) -> str:
        """What a person reads (queue.counts.shown_status)."""
        return shown_status(self.status, self.counts)

    @property
    def waiting_for_decision(self) -> bool:
        """Sending, drained but for unconfirmed jobs: only a person can end it."""
        return self.state == WAITING

    @property
    def done(self) -> int:
        """Jobs in a final state (sent, failed, cancelled)."""
        return self.counts.done

    @property
    def percent(self) -> int:
        """Its progress bar (queue.counts.percent_done)."""
        return percent_done(self.status, self.counts)

    @property
    def settled(self) -> bool:
        """Nothing will change without a person: sent or cancelled with nothing in flight, or
        an unscheduled draft."""
        if self.status == "draft":
            return self.send_at is None
        return self.status in ("sent", "cancelled") and not self.counts.sending

    def as_dict(self) -> dict[str, Any]:
        """The flat keys of `campaign status --json` and of the API's CampaignStatus, in
        their order: the fields with the counts spread in, the state word, the complaint
        rate and what retry-failed would send again."""
        c = self.counts
        return {
            "id": self.id,
            "name": self.name,
            "status": self.status,
            "state": self.state,
            "no_live_worker": self.no_live_worker,
            "broadcast_id": self.broadcast_id,
            **c.as_dict(),
            "complaint_rate": c.complaint_rate,
            "retryable": c.retryable,
            "pause_reason": self.pause_reason,
            "last_sender_fault": self.last_sender_fault,
            "enqueue_done": self.enqueue_done,
            "send_at": self.send_at,
            "schedule_error": self.schedule_error,
            "last_problem": self.last_problem,
            "worker_deaths": self.worker_deaths,
            "last_worker_death": self.last_worker_death,
            "unconfirmed_jobs": [
                {**asdict(u), "said": self.words(u.id)} for u in self.unconfirmed_jobs
            ],
            "track": self.track,
            **self.engagement.as_dict(),
        }


def status(
    conn: psycopg.Connection[dict[str, Any]], campaign_id: int, lease_seconds: float = LEASE
) -> CampaignStatus:
    """The campaign's state and exact counts, read from the queue in one snapshot.

    `no_live_worker` says that it has work for a worker and no worker is live (heartbeat
    within `lease_seconds`, database clock) to do it."""
    with conn.transaction():
        finish_sync(conn)
    with conn.transaction():
        conn.execute(QUERIES["snapshot"])
        c = conn.execute(QUERIES["status"], (campaign_id,)).fetchone()
        if c is None:
            raise UnknownCampaign(f"no campaign with id {campaign_id}")
        counts = count(conn, c["broadcast_id"])  # the one count: exact after retention too
        problem: Problem | None = None
        if c["final_counts"] is not None:  # its jobs were deleted (retention): frozen before
            frozen = c["final_counts"].get("last_problem")
            problem = Problem.of(frozen) if frozen else None
        elif c["broadcast_id"] is not None:
            problem = last_problem(conn, c["broadcast_id"])
        held: list[Unconfirmed] = []
        said: dict[int, list[Note]] = {}
        if counts.unconfirmed and c["broadcast_id"] is not None:
            held = unconfirmed_jobs(conn, c["broadcast_id"], limit=UNCONFIRMED_SHOWN)
            for n in reconcile_notes(conn, c["broadcast_id"]):  # issue 41: each source's word
                said.setdefault(n.job_id, []).append(n)
        work_left = c["status"] == "sending" and (
            counts.unfinished > counts.unconfirmed or not c["enqueue_done"]
        )
        idle = work_left and live_workers(conn, lease_seconds) == 0
        # Issue 37: read in the same snapshot; a campaign that tracks nothing has no events.
        track = Track.parse(c["track"])
        figures = engagement(conn, c["broadcast_id"], track.anonymous) if track else Engagement()
    return CampaignStatus(
        id=c["id"],
        name=c["name"],
        status=c["status"],
        no_live_worker=idle,
        broadcast_id=c["broadcast_id"],
        counts=counts,
        pause_reason=c["pause_reason"],
        last_sender_fault=c["last_sender_fault"],
        enqueue_done=c["enqueue_done"],
        send_at=c["send_at"],
        schedule_error=c["schedule_error"],
        last_problem=reply_summary(problem) if problem else None,
        worker_deaths=int(c["worker_deaths"] or 0),
        last_worker_death=c["last_worker_death"],
        unconfirmed_jobs=tuple(held),
        said={k: tuple(v) for k, v in said.items()},
        track=c["track"],
        engagement=figures,
    )


class Replied(Protocol):
    """A job's last reply, as a recipient row (recipients.RecipientRow) or a broadcast's
    latest problem (queue.counts.Problem) carries it."""

    @property
    def last_code(self) -> int | None: ...
    @property
    def last_enhanced(self) -> str | None: ...
    @property
    def last_reply(self) -> str | None: ...
    @property
    def last_stage(self) -> str | None: ...


def _part(job: Replied | Mapping[str, Any], key: str) -> Any:
    # A page a face reads with its own statement (web/queries.py) still hands a row by key.
    return job.get(key) if isinstance(job, Mapping) else getattr(job, key)


def reply_line(job: Replied | Mapping[str, Any]) -> str:
    """`code enhanced reply` of a job's last reply, one line, the enhanced code once (the
    stored text usually begins with it: "250 2.0.0 2.0.0 queued" was shown, issue 35). Every
    surface that shows a reply as text shows this."""
    reply = " ".join(str(_part(job, "last_reply") or "").split())
    enhanced = _part(job, "last_enhanced")
    if enhanced and reply.split(" ", 1)[0] == str(enhanced):
        enhanced = None  # the reply text begins with it already
    return " ".join(str(p) for p in (_part(job, "last_code"), enhanced, reply) if p)


def reply_summary(job: Replied | Mapping[str, Any]) -> str:
    """`code enhanced reply (stage)` of a job's last reply, whatever of it there is, one line."""
    text = reply_line(job)
    stage = _part(job, "last_stage")
    return f"{text} ({stage})" if stage else text


def _set_running(conn: psycopg.Connection[dict[str, Any]], campaign_id: int, run: bool) -> None:
    """Resume (`run`) a paused campaign or pause a sending one; anything else is refused."""
    with conn.transaction():
        c = _lock(conn, campaign_id)
        if c.status != ("paused" if run else "sending") or c.broadcast_id is None:
            verb = "resume" if run else "pause"
            raise CampaignError(f"cannot {verb} campaign {campaign_id}: it is {c.status}")
        set_running_in_queue(conn, c.broadcast_id, run)


def _lock(conn: psycopg.Connection[dict[str, Any]], campaign_id: int) -> Campaign:
    """The campaign's status and broadcast, row-locked for this transaction."""
    c = lock_campaign(conn, campaign_id)
    if c is None:
        raise UnknownCampaign(f"no campaign with id {campaign_id}")
    return c


def cancel(conn: psycopg.Connection[dict[str, Any]], campaign_id: int) -> int:
    """Cancel every job not yet claimed; messages in flight finish. The number cancelled now
    (claims workers give back later are cancelled then: `cancel_and_settle` counts them)."""
    return _cancel(conn, campaign_id)[0]


def _cancel(conn: psycopg.Connection[dict[str, Any]], campaign_id: int) -> tuple[int, int]:
    """(jobs cancelled now, jobs held by workers at that moment)."""
    with conn.transaction():
        c = _lock(conn, campaign_id)
        if c.status in ("sent", "cancelled"):
            raise CampaignError(f"cannot cancel campaign {campaign_id}: it is {c.status}")
        done = cancel_in_queue(conn, c)
        return done.jobs, done.held


@dataclass(frozen=True)
class CancelReport:
    """What a cancel did, once workers gave back the claims they had not started."""

    cancelled: int  # jobs that will not be sent
    in_flight: int  # being sent at the cancel: their outcome (sent, failed) still lands
    sent: int  # sent before it (and in flight since)


def cancel_and_settle(
    conn: psycopg.Connection[dict[str, Any]], campaign_id: int, wait: float = 15.0
) -> CancelReport:
    """Cancel, then wait (at most `wait` s) until no job is held, so that the claims workers
    held but had not started, which they give back on the cancel's NOTIFY, count as cancelled
    (the queue's finish cancels them) rather than as in flight."""
    now, held = _cancel(conn, campaign_id)
    counts, deadline = status(conn, campaign_id).counts, time.monotonic() + wait
    while counts.sending and time.monotonic() < deadline:
        time.sleep(0.05)
        counts = status(conn, campaign_id).counts
    given_back = counts.cancelled - now  # held, unstarted, cancelled once given back
    return CancelReport(counts.cancelled, max(0, held - given_back), counts.sent)


def pause(conn: psycopg.Connection[dict[str, Any]], campaign_id: int) -> None:
    """Stop new claims at once; messages in flight finish."""
    _set_running(conn, campaign_id, run=False)


def resume(conn: psycopg.Connection[dict[str, Any]], campaign_id: int) -> None:
    """Let a paused campaign's broadcast be claimed again."""
    _set_running(conn, campaign_id, run=True)
