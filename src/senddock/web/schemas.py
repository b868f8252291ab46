"""Pydantic models of every API request and response, so /openapi.json is exact.

Strings are bounded and refuse NUL bytes (Postgres text cannot hold them); ids are bounded to
bigint; page sizes are capped. Bad input is a 422 naming the field, never a 500.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from senddock.messages.render import HeaderError, one_mailbox

BIGINT = 2**63 - 1
MAX_PER_PAGE = 500


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain a NUL byte")
    return value


def _one_from(value: str) -> str:
    # campaigns.create_campaign refuses it too (messages.render): here it is the field's 422.
    try:
        one_mailbox("from", value, field="from_addr")
    except HeaderError as exc:
        raise ValueError(exc.message) from None
    return value


def _one_line(value: str) -> str:
    if "\r" in value or "\n" in value:
        raise ValueError("must not contain CR or LF")
    return value


Text = Annotated[str, Field(max_length=1_000), AfterValidator(_no_nul)]
Line = Annotated[str, Field(max_length=1_000), AfterValidator(_no_nul), AfterValidator(_one_line)]
Body = Annotated[str, Field(max_length=1_000_000), AfterValidator(_no_nul)]
Name = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_no_nul)]
Address = Annotated[
    str, Field(min_length=1, max_length=320), AfterValidator(_no_nul), AfterValidator(_one_line)
]
# A list's description: audience.lists.clean_description trims it and holds it to 2,000
# characters (a 422 about `description`); this bound only keeps a request body small.
Description = Annotated[str, Field(max_length=10_000), AfterValidator(_no_nul)]
Id = Annotated[int, Field(ge=1, le=BIGINT)]
Attributes = dict[str, Any]

Reason = Literal["bounce", "unsubscribe", "complaint", "manual"]
# Why a bounce failed (bounces.classify: userunknown, mailboxfull, blocked, feedback, …); a
# word, not a closed list: the taxonomy may grow. None on reports recorded before 0027.
BounceReason = Annotated[
    str, Field(description="Why it failed: userunknown, mailboxfull, blocked, feedback, …")
]
BounceKind = Literal["hard", "soft", "policy", "complaint"]


class Strict(BaseModel):
    """Request bodies: unknown fields are refused (a typo is not silently ignored)."""

    model_config = ConfigDict(extra="forbid")


class Page(BaseModel):
    page: int
    per_page: int
    total: int


# -- subscribers and lists ----------------------------------------------------------------


class Membership(BaseModel):
    name: str
    status: str
    created_at: datetime
    updated_at: datetime | None = None


class Suppression(BaseModel):
    email: str
    reason: str
    created_at: datetime
    detail: str | None = None
    source_broadcast_id: int | None = None
    bounce_reason: BounceReason | None = None


class SubscriberMessage(BaseModel):
    campaign_id: int
    campaign: str
    status: str
    failure: str | None
    sent_at: datetime | None
    message_id: str


class SubscriberSummary(BaseModel):
    id: int
    email: str
    name: str
    status: str = Field(
        description="active; bounced; erased; or suppressed: no broadcast sends to the address"
    )
    attributes: Attributes
    created_at: datetime
    updated_at: datetime


class SuppressedInfo(BaseModel):
    reason: str
    created_at: datetime
    detail: str | None = None


class Subscriber(SubscriberSummary):
    lists: list[Membership]
    suppressed: SuppressedInfo | None
    messages: list[SubscriberMessage]


class SubscriberPage(Page):
    items: list[SubscriberSummary]


class SubscriberIn(Strict):
    email: Address
    name: Line = ""
    attributes: Attributes = Field(default_factory=dict)
    lists: list[Name] = Field(default_factory=list, max_length=100)
    send_confirmation: bool = Field(
        default=True, description="On double opt-in lists, email the confirmation request now."
    )


class SubscriberUpdate(Strict):
    email: Address | None = None
    name: Line | None = None
    attributes: Attributes | None = Field(
        default=None, description="Merged into the attributes; a null value removes a key."
    )
    lists: list[Name] = Field(default_factory=list, max_length=100)


class Removed(BaseModel):
    message: str


class ListInfo(BaseModel):
    id: int
    name: str
    description: str | None = Field(description="What the list is about ('' when none).")
    double_opt_in: bool
    from_addr: str | None
    public: bool = Field(description="Takes sign-ups at POST /subscribe (GET .../form).")
    confirmed: int = Field(description="Confirmed members a broadcast sends to (not suppressed)")
    unconfirmed: int = Field(description="Members yet to confirm (not suppressed)")
    unsubscribed: int
    suppressed: int = Field(
        default=0, description="Members whose address is suppressed: no broadcast sends to them"
    )


class ListIn(Strict):
    name: Name
    description: Description | None = Field(
        default=None, description="What the list is about; null keeps it, '' clears it."
    )
    double_opt_in: bool | None = None
    from_addr: Line | None = None


class ListOptions(Strict):
    name: Name | None = Field(
        default=None, description="A new name (409 if another list has it); null keeps it."
    )
    description: Description | None = Field(
        default=None, description="What the list is about; null keeps it, '' clears it."
    )
    double_opt_in: bool | None = None
    from_addr: Line | None = None
    public: bool | None = Field(default=None, description="Open or close POST /subscribe.")


class SignupForm(BaseModel):
    """A list's copy-paste sign-up form, and the signed token its `list` field carries."""

    list_id: int
    public: bool
    token: str
    html: str


# -- imports ------------------------------------------------------------------------------


class ImportError_(BaseModel):
    line: int
    reason: str


class ImportJob(BaseModel):
    id: int
    list_name: str
    status: Literal["queued", "running", "done", "failed"]
    rows_read: int
    imported: int
    rejected: int
    errors: list[ImportError_]
    error: str | None
    created_at: datetime
    finished_at: datetime | None


# -- campaigns ----------------------------------------------------------------------------


# What a campaign tracks (issue 37): as stored, '' for nothing.
Track = Annotated[
    str,
    Field(
        description="'', 'opens', 'clicks' or 'opens,clicks', perhaps with ',anonymous'"
        " (tracking is opt-in)"
    ),
]
TrackIn = Annotated[
    str,
    Field(
        max_length=40,
        description="opens, clicks, opens,clicks, both or none; ',anonymous' for counts only",
        examples=["opens,clicks"],
    ),
    AfterValidator(_no_nul),
]


class LinkClicks(BaseModel):
    """One tracked link of a campaign's message."""

    url: str
    clicks: int = Field(description="Clicks judged human")
    unique: int | None = Field(description="People who made them, each once (null: anonymous)")
    machine: int = Field(default=0, description="Clicks made by a machine")


class SourceWord(BaseModel):
    """What one source (the relay's log, a provider's search) said of an unconfirmed job at
    the last reconcile (issue 41)."""

    source: str = Field(description="relay-log, mailgun, postmark or sendgrid")
    said: str = Field(description="accepted, not accepted, not seen or cannot tell")
    detail: str = Field(description="What it matched, or why it cannot tell")


class UnconfirmedJob(BaseModel):
    """A recipient whose final dot went and whose outcome is unknown (issue 23)."""

    id: int
    email: str
    message_id: str
    worker_id: int | None = Field(description="The worker that sent the dot")
    dot_at: datetime | None = Field(description="When the final dot was about to go")
    relay: str | None = Field(description="The SMTP server it went to")
    said: list[SourceWord] = Field(
        default_factory=list, description="What each source said at the last reconcile"
    )


# Reports after the relay's 250 (queue.counts.Counts), on the detail and in the list: one
# definition each, used by both models (the detail keeps the CLI's key order).
BouncedLater = Annotated[int, Field(description="Hard bounces after the relay's 250")]
SoftLater = Annotated[int, Field(description="Soft bounces after the relay's 250")]
PolicyLater = Annotated[int, Field(description="Policy refusals after the relay's 250")]
Complaints = Annotated[int, Field(description="Spam complaints (feedback loops)")]
ComplaintRate = Annotated[
    float, Field(description="Complaints per message sent; Gmail's limit is 0.003")
]


class LaterCounts(BaseModel):
    """Reports after the relay's 250, as the campaign list carries them."""

    bounced_later: BouncedLater = 0
    soft_later: SoftLater = 0
    policy_later: PolicyLater = 0
    complaints: Complaints = 0
    complaint_rate: ComplaintRate = 0.0


class CampaignStatus(BaseModel):
    """The same keys as `senddock campaign status --json`."""

    id: int
    name: str
    status: str
    state: str = Field(
        description="What a person reads: the status, or 'waiting for a decision' once only"
        " unconfirmed recipients are left (confirm or resend them)"
    )
    no_live_worker: bool = Field(
        default=False, description="It has work for a worker and no worker is live"
    )
    broadcast_id: int | None
    total: int
    pending: int
    sending: int
    retry: int
    sent: int
    failed: int
    cancelled: int
    unconfirmed: int = Field(
        default=0,
        description="Final dot sent, no outcome recorded: resend-unconfirmed or confirm them",
    )
    bounced: int
    suppressed: int
    exhausted: int
    rejected: int
    bounced_later: BouncedLater = 0
    soft_later: SoftLater = 0
    policy_later: PolicyLater = 0
    complaints: Complaints = 0
    unfinished: int = Field(
        default=0,
        description="Jobs pending, sending, retry or unconfirmed: the campaign is sent at 0",
    )
    complaint_rate: ComplaintRate = 0.0
    retryable: int = Field(
        default=0, description="Failed, not bounced nor suppressed: what retry-failed sends again"
    )
    pause_reason: str | None
    last_sender_fault: str | None
    enqueue_done: bool = Field(
        description="False while workers still enqueue a big broadcast: `total` grows until then"
    )
    send_at: datetime | None = Field(default=None, description="A draft's scheduled time")
    schedule_error: str | None = Field(
        default=None, description="Why the scheduler did not send it at its time"
    )
    last_problem: str | None = Field(
        default=None, description="The latest reply that held back or failed a recipient"
    )
    worker_deaths: int = Field(
        default=0, description="Worker processes that died holding its messages"
    )
    last_worker_death: str | None = Field(
        default=None, description="The latest of those: when, which process, and why"
    )
    unconfirmed_jobs: list[UnconfirmedJob] = Field(
        default_factory=list, description="The first unconfirmed recipients (when, where)"
    )
    track: Track = ""
    opened: int | None = Field(
        default=0, description="People who opened it, judged human (null: anonymous)"
    )
    clicked: int | None = Field(
        default=0, description="People who clicked a link, judged human (null: anonymous)"
    )
    opened_machine: int | None = Field(
        default=0, description="People with an open made by a machine (null: anonymous)"
    )
    clicked_machine: int | None = Field(
        default=0, description="People with a click made by a machine (null: anonymous)"
    )
    opens: int = Field(default=0, description="Every open judged human")
    clicks: int = Field(default=0, description="Every click judged human")
    opens_machine_events: int = Field(default=0, description="Every open made by a machine")
    clicks_machine_events: int = Field(default=0, description="Every click made by a machine")
    links: list[LinkClicks] = Field(
        default_factory=list, description="Each tracked link, in the order of the message"
    )


class CampaignSummary(LaterCounts):
    id: int
    name: str
    status: str
    state: str = Field(description="What a person reads (see CampaignStatus.state)")
    subject: str
    from_addr: str
    lists: list[str]
    send_at: datetime | None
    schedule_error: str | None
    broadcast_id: int | None
    created_at: datetime
    started_at: datetime | None = Field(None, description="When it was sent (its broadcast began)")
    finished_at: datetime | None = Field(None, description="When nothing was left to send")
    total: int
    sent: int
    failed: int
    unconfirmed: int = 0


class CampaignPage(Page):
    items: list[CampaignSummary]


class CampaignIn(Strict):
    name: Line = Field(min_length=1)
    lists: list[Name] = Field(min_length=1, max_length=100)
    subject: Body
    from_addr: Annotated[Body, AfterValidator(_one_from)] = Field(
        description='One address, e.g. "News <news@example.org>"'
    )
    text_body: Body | None = None
    html_body: Body | None = None
    reply_to: Body | None = None
    send_at: datetime | None = Field(default=None, description="ISO 8601 with a time zone")
    segment: Name | None = Field(default=None, description="A saved segment narrowing the lists")
    filter: Body | None = Field(default=None, description="Or a filter of its own (segments)")
    markdown_body: Body | None = Field(default=None, description="Instead of html_body")
    layout: Name | None = Field(default=None, description='A layout name; "none": no layout')
    track: TrackIn | None = Field(
        default=None, description="What it tracks; default: the server's SENDDOCK_TRACK (off)"
    )


class CampaignEdit(Strict):
    """The fields to change (issue 22); those left out stay. An empty `reply_to`,
    `text_body`, `html_body` or `markdown_body` removes it; `lists` replaces every list;
    a Markdown body replaces the HTML one, a segment the filter, and the other way round."""

    name: Line | None = Field(default=None, min_length=1)
    lists: list[Name] | None = Field(default=None, min_length=1, max_length=100)
    subject: Body | None = None
    from_addr: Annotated[Body, AfterValidator(_one_from)] | None = None
    text_body: Body | None = None
    html_body: Body | None = None
    reply_to: Body | None = None
    markdown_body: Body | None = Field(default=None, description="Instead of html_body")
    layout: Body | None = Field(
        default=None, description='A layout name; "none": no layout; "": the default one'
    )
    segment: Body | None = Field(default=None, description='A saved segment; "": none')
    filter: Body | None = Field(default=None, description='A filter of its own; "": none')
    track: TrackIn | None = Field(default=None, description="What it tracks; none: nothing")


class CloneIn(Strict):
    name: Line | None = Field(default=None, description='Default: "NAME (copy)"')


class Preview(BaseModel):
    headers: dict[str, str]
    text: str | None
    html: str | None
    raw: str


class TestIn(Strict):
    to: list[Address] = Field(min_length=1, max_length=20)


class TestResult(BaseModel):
    address: str
    sent: bool
    reply: str


class Sent(BaseModel):
    broadcast_id: int
    total: int = Field(description="Recipients enqueued so far (workers enqueue the rest)")
    created: bool = Field(description="False when the campaign had already been sent")
    workers_live: int = Field(description="Workers whose heartbeat is within the lease")
    warning: str | None = Field(
        default=None, description="Set when no worker runs: nothing is sent until one does"
    )


class ScheduleIn(Strict):
    """The send time, named `send_at` as on the campaign (`at`, its old name, still works)."""

    send_at: datetime | None = Field(
        default=None, description="ISO 8601 with a time zone; null unschedules"
    )
    at: datetime | None = Field(
        default=None,
        description="Deprecated: the old name of send_at",
        json_schema_extra={"deprecated": True},
    )

    @model_validator(mode="before")
    @classmethod
    def _one_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and len({"send_at", "at"} & set(data)) != 1:
            raise ValueError("give send_at (a time with a zone, or null to unschedule)")
        return data

    @property
    def field(self) -> str:
        """The name the request used for the time."""
        return "send_at" if "send_at" in self.model_fields_set else "at"

    @property
    def when(self) -> datetime | None:
        return self.send_at if self.field == "send_at" else self.at


class Cancelled(BaseModel):
    cancelled: int = Field(description="Messages that will not be sent")
    in_flight: int = Field(
        default=0, description="Being sent when cancelled: their outcome still lands"
    )
    campaign: CampaignStatus


class Requeued(BaseModel):
    requeued: int
    campaign: CampaignStatus


class UnconfirmedJobs(BaseModel):
    """Which unconfirmed jobs to act on (ids from the campaign's `unconfirmed_jobs`)."""

    model_config = ConfigDict(extra="forbid")
    jobs: list[int] = Field(max_length=10_000, description="Job ids; the others are left alone")


class UnconfirmedDone(BaseModel):
    """What resend-unconfirmed or confirm did."""

    unconfirmed: int = Field(description="Unconfirmed recipients queued again, or confirmed")
    campaign: CampaignStatus


class ReconcileDone(BaseModel):
    """What a reconcile did (issue 41)."""

    confirmed: int = Field(description="Unconfirmed recipients a source saw accepted: sent")
    resent: int = Field(description="Those a source proves were never accepted: queued again")
    left: int = Field(description="Those no source could tell: a person's to decide")
    campaign: CampaignStatus


class WaitingCampaign(BaseModel):
    """A campaign with unconfirmed recipients (issue 41): its exact count and the first few."""

    id: int = Field(description="The campaign's id")
    name: str
    subject: str
    status: str
    state: str = Field(description="What a person reads (see CampaignStatus.state)")
    broadcast_id: int
    unconfirmed: int = Field(description="Its unconfirmed recipients, all of them")
    jobs: list[UnconfirmedJob] = Field(description="The first of them, oldest final dot first")
    more: int = Field(description="Unconfirmed recipients beyond `jobs`")
    resendable: bool = Field(
        description="Sending or paused: resent by the one action (a cancelled one: confirm)"
    )


class Unconfirmed(BaseModel):
    """Every campaign's unconfirmed recipients at once, newest campaign first (issue 41)."""

    campaigns: list[WaitingCampaign]
    total: int = Field(description="Unconfirmed recipients of every campaign")
    resendable: int = Field(description="Those of campaigns sending or paused")
    fingerprint: str = Field(
        description="Names the set of resendable jobs: it changes when that set does"
    )


class Recipient(BaseModel):
    email: str
    status: str
    failure: str | None
    attempts: int
    sent_at: datetime | None
    message_id: str
    last_code: int | None
    last_enhanced: str | None
    last_reply: str | None = Field(description="The reply's text as the relay sent it")
    reply: str = Field(
        "", description="The last reply in one line: code, enhanced code (once), text"
    )
    settled_by: str | None = Field(
        default=None,
        description="Who settled it once it was unconfirmed: person, relay-log, mailgun, …,"
        " ses-event, … (issue 41)",
    )
    settled_at: datetime | None = Field(default=None, description="When it was settled")


class RecipientPage(Page):
    items: list[Recipient]


# -- suppressions, workers ----------------------------------------------------------------


class BounceFinding(BaseModel):
    """One recipient a returned message or provider event reported on (bounces.store)."""

    id: int
    created_at: datetime
    kind: BounceKind
    reason: BounceReason | None
    recipient: str | None
    status: str | None
    reply: str | None
    diagnostic: str | None
    broadcast_id: int | None
    subscriber_id: int | None
    campaign_id: int | None
    message: int = Field(description="The returned message or event the finding came from")
    state: str
    source: str
    why: str | None


class BounceList(BaseModel):
    items: list[BounceFinding]
    more: int = Field(description="How many more findings match than `limit` shows")


class SuppressionIn(Strict):
    email: Address
    reason: Reason = "manual"
    detail: Line | None = None


class SuppressionAdded(BaseModel):
    email: str
    added: bool = Field(description="False when the address already was suppressed")


class SuppressionRemoved(BaseModel):
    email: str
    removed: bool


class WorkerInfo(BaseModel):
    id: int
    host: str
    pid: int
    concurrency: int
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age: float
    health: Literal["live", "late", "stopping", "dead"] = Field(
        description="dead: silent past the lease; a live worker rescues what it holds"
    )
    stopping: bool
    holding: int


class Ready(BaseModel):
    ready: bool
    database: bool
    migrations: bool
    message: str | None = None


CampaignState = Literal["draft", "sending", "paused", "sent", "cancelled"]


class ConfirmationRequest(BaseModel):
    list: str
    sent: bool
    reply: str


class SubscriberCreated(Subscriber):
    confirmation_requests: list[ConfirmationRequest]


class ConsentSignup(BaseModel):
    """One public sign-up: the proof of consent to one list (0022)."""

    requested_at: datetime
    ip: str
    user_agent: str
    double_opt_in: bool
    confirmed_at: datetime | None
    list_id: int | None
    list: str | None
    consent_text: str = Field(
        default="", description="The words agreed to ('': a sign-up from before they were kept)"
    )


class ConsentEvent(BaseModel):
    """One change the subscriber made to their lists (0023); `list` None: every list."""

    at: datetime
    action: str
    source: str
    campaign_id: int | None
    list_id: int | None
    list: str | None


class Consent(BaseModel):
    subscriber_id: int
    email: str
    signups: list[ConsentSignup]
    events: list[ConsentEvent]


class EraseIn(Strict):
    confirm: Address = Field(
        description="The subscriber's address, typed again: the erasure cannot be undone."
    )
    keep_suppressed: bool = Field(
        default=False,
        description="They asked never to be mailed again: keep a SHA-256 of the address"
        " suppressed (never the address).",
    )


class Erased(BaseModel):
    subscriber_id: int
    kept_row: bool = Field(description="Jobs name them: the row stays, holding nothing of theirs.")
    jobs: int
    cancelled: int
    findings: int
    messages: int
    consents: int
    events: int
    suppression: str | None = Field(description="The reason of the suppression removed, if any.")
    kept_suppressed: bool
    message: str
