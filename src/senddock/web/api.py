"""The REST API under /api/v1: thin endpoints over the campaign, audience and delivery services.

Endpoints are sync `def`s (FastAPI runs them in its thread pool) on connections of the app's
pool. A SendDockError (senddock/errors.py) raised anywhere below is answered in the JSON
error shape with its status and field (web/errors.py).
"""

from __future__ import annotations

import dataclasses
import email
import email.message
import email.policy
import shutil
import tempfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TextIO

import psycopg
from fastapi import APIRouter, Depends, File, Form, Query, Request, UploadFile
from fastapi import Path as PathParam
from fastapi.responses import StreamingResponse

from senddock import campaigns
from senddock.audience import consent, erasure, optin, signup, suppressions
from senddock.audience import lists as lists_api
from senddock.audience import subscribers as subscribers_api
from senddock.audience.addresses import normalize
from senddock.bounces import store as bounce_store
from senddock.campaigns import compose, edits, reconcile, trial, unconfirmed
from senddock.campaigns.campaigns import JobStatus
from senddock.campaigns.workers import NO_WORKER, live_workers
from senddock.delivery import oneoff
from senddock.delivery.rescuer import list_workers
from senddock.errors import Invalid, NotFound
from senddock.views import plain
from senddock.web import auth, imports, queries
from senddock.web import schemas as s
from senddock.web.downloads import CSV, csv_download
from senddock.web.errors import RESPONSES

Conn = psycopg.Connection[dict[str, Any]]

router = APIRouter(
    prefix="/api/v1",
    dependencies=[Depends(auth.require_api_auth)],
    responses=RESPONSES,
)


def get_conn(request: Request) -> Iterator[Conn]:
    """A connection of the app's pool (autocommit, dict rows) for this request."""
    with request.app.state.pool.connection() as conn:
        yield conn


Db = Annotated[Conn, Depends(get_conn)]
CampaignId = Annotated[int, PathParam(ge=1, le=s.BIGINT)]
PageNo = Annotated[int, Query(ge=1, le=1_000_000)]
PerPage = Annotated[int, Query(ge=1, le=s.MAX_PER_PAGE)]
Search = Annotated[
    str | None, Query(max_length=200, pattern=r"^[^\x00]*$", description="Substring to find")
]


def _status(conn: Conn, campaign_id: int) -> s.CampaignStatus:
    return s.CampaignStatus(**campaigns.status(conn, campaign_id).as_dict())


def _refuse_past(conn: Conn, at: datetime | None, field: str) -> None:
    try:
        campaigns.refuse_past(conn, at)
    except campaigns.SendTimeInPast as exc:
        raise Invalid(str(exc), field=field) from exc


def _subscriber(conn: Conn, subscriber_id: int) -> s.Subscriber:
    address = queries.subscriber_email(conn, subscriber_id)
    if address is None:
        raise NotFound(f"no subscriber with id {subscriber_id}")
    found = subscribers_api.show(conn, address)
    return s.Subscriber(**{**plain(found), "status": found.shown_status})


# -- subscribers ----------------------------------------------------------------------------


@router.get("/subscribers", tags=["subscribers"], response_model=s.SubscriberPage)
def list_subscribers(
    conn: Db,
    q: Search = None,
    list_name: Annotated[
        str | None, Query(alias="list", max_length=200, pattern=r"^[^\x00]*$")
    ] = None,
    filter_text: Annotated[
        str | None,
        Query(
            alias="filter",
            max_length=2_000,
            pattern=r"^[^\x00]*$",
            description='A segment filter, e.g. attributes.city = "London"',
        ),
    ] = None,
    page: PageNo = 1,
    per_page: PerPage = 50,
) -> s.SubscriberPage:
    """Subscribers by id, optionally matching `q` (address or name), on `list` and matching
    `filter` (the segment filter language: attributes, dates, address, name)."""
    pattern, offset = queries.like(q), (page - 1) * per_page
    rows = queries.subscribers_page(
        conn, pattern, list_name, per_page, offset, filter_text=filter_text
    )
    total = queries.subscriber_total(conn, pattern, list_name, filter_text)
    items = [
        s.SubscriberSummary(
            **{**r, "status": subscribers_api.shown_status(r["status"], bool(r["suppressed"]))}
        )
        for r in rows
    ]
    return s.SubscriberPage(page=page, per_page=per_page, total=total, items=items)


@router.post(
    "/subscribers", tags=["subscribers"], response_model=s.SubscriberCreated, status_code=201
)
def add_subscriber(request: Request, conn: Db, body: s.SubscriberIn) -> s.SubscriberCreated:
    """Add a subscriber to lists (created if new). On double opt-in lists the membership waits
    for confirmation; the request is emailed now unless `send_confirmation` is false."""
    sid = subscribers_api.add(
        conn, body.email, body.name, body.attributes or None, tuple(body.lists)
    )
    sent: list[s.ConfirmationRequest] = []
    if body.send_confirmation:
        state = request.app.state
        address = queries.subscriber_email(conn, sid) or body.email
        built = optin.requests(optin.waiting(conn, address), state.link_key, state.settings)
        for list_name, reply in oneoff.send(state.settings, built):
            sent.append(
                s.ConfirmationRequest(list=list_name, sent=reply.accepted, reply=reply.summary())
            )
    return s.SubscriberCreated(**_subscriber(conn, sid).model_dump(), confirmation_requests=sent)


@router.get("/subscribers/{subscriber_id}", tags=["subscribers"], response_model=s.Subscriber)
def get_subscriber(
    conn: Db, subscriber_id: Annotated[int, PathParam(ge=1, le=s.BIGINT)]
) -> s.Subscriber:
    """A subscriber with lists, suppression and latest messages."""
    return _subscriber(conn, subscriber_id)


@router.patch("/subscribers/{subscriber_id}", tags=["subscribers"], response_model=s.Subscriber)
def update_subscriber(
    conn: Db,
    subscriber_id: Annotated[int, PathParam(ge=1, le=s.BIGINT)],
    body: s.SubscriberUpdate,
) -> s.Subscriber:
    """Change name, address or attributes (merged; null removes a key); join lists."""
    address = queries.subscriber_email(conn, subscriber_id)
    if address is None:
        raise NotFound(f"no subscriber with id {subscriber_id}")
    subscribers_api.update(
        conn,
        address,
        name=body.name,
        attributes=body.attributes,
        new_email=body.email,
        lists=tuple(body.lists),
    )
    return _subscriber(conn, subscriber_id)


@router.delete("/subscribers/{subscriber_id}", tags=["subscribers"], response_model=s.Removed)
def remove_subscriber(
    conn: Db,
    subscriber_id: Annotated[int, PathParam(ge=1, le=s.BIGINT)],
    list_name: Annotated[
        str | None,
        Query(alias="list", max_length=200, pattern=r"^[^\x00]*$", description="Only leave it"),
    ] = None,
) -> s.Removed:
    """Remove from one list, or from every list and the database (kept for its history)."""
    address = queries.subscriber_email(conn, subscriber_id)
    if address is None:
        raise NotFound(f"no subscriber with id {subscriber_id}")
    return s.Removed(message=subscribers_api.remove(conn, address, list_name))


def _consent(conn: Conn, subscriber_id: int) -> consent.ConsentRecord:
    address = queries.subscriber_email(conn, subscriber_id)
    if address is None:
        raise NotFound(f"no subscriber with id {subscriber_id}")
    return consent.record(conn, subscriber_id, address)


@router.get("/subscribers/{subscriber_id}/consent", tags=["subscribers"], response_model=s.Consent)
def get_consent(conn: Db, subscriber_id: Annotated[int, PathParam(ge=1, le=s.BIGINT)]) -> s.Consent:
    """Their consent record: each sign-up (time, IP, User-Agent, list, confirmation) and each
    change they made to their lists, oldest first. `/consent.csv`: the same as CSV."""
    return s.Consent(**_consent(conn, subscriber_id).as_json())


@router.get(
    "/subscribers/{subscriber_id}/consent.csv",
    tags=["subscribers"],
    response_class=StreamingResponse,
    responses=CSV,
)
def get_consent_csv(
    conn: Db, subscriber_id: Annotated[int, PathParam(ge=1, le=s.BIGINT)]
) -> StreamingResponse:
    """The consent record as one CSV (`kind` signup or event), spreadsheet-safe cells."""
    record = _consent(conn, subscriber_id)

    def write(out: TextIO) -> int:
        record.write_csv(out)
        return len(record.signups) + len(record.events)

    return csv_download(write, f"consent-{subscriber_id}.csv")


@router.post("/subscribers/{subscriber_id}/erase", tags=["subscribers"], response_model=s.Erased)
def erase_subscriber(
    conn: Db, subscriber_id: Annotated[int, PathParam(ge=1, le=s.BIGINT)], body: s.EraseIn
) -> s.Erased:
    """Erase a subscriber now (GDPR article 17): address, name, attributes, consent and
    preference records leave every table; campaign counts stay; their unsent messages are
    cancelled. `confirm` must be their address. 409 while a message to them is in flight."""
    address = queries.subscriber_email(conn, subscriber_id)
    if address is None:
        raise NotFound(f"no subscriber with id {subscriber_id}")
    if body.confirm.strip().lower() != address.lower():
        raise Invalid("type the subscriber's address to confirm the erasure", field="confirm")
    done = erasure.erase(conn, address, keep_suppressed=body.keep_suppressed)
    return s.Erased(**dataclasses.asdict(done), message=done.summary(address))


# -- lists ----------------------------------------------------------------------------------


def _view(conn: Conn, list_id: int) -> lists_api.ListView:
    for row in lists_api.all_lists(conn):
        if row.id == list_id:
            return row
    raise NotFound(f"no list with id {list_id}")


def _list(conn: Conn, list_id: int) -> s.ListInfo:
    return s.ListInfo(**plain(_view(conn, list_id)))


ListId = Annotated[int, PathParam(ge=1, le=s.BIGINT)]


@router.get("/lists", tags=["lists"], response_model=list[s.ListInfo])
def get_lists(conn: Db) -> list[s.ListInfo]:
    """Every list with its options and members by status."""
    return [s.ListInfo(**plain(r)) for r in lists_api.all_lists(conn)]


@router.post("/lists", tags=["lists"], response_model=s.ListInfo, status_code=201)
def create_list(conn: Db, body: s.ListIn) -> s.ListInfo:
    """Create a list (or set the description and options of the one with that name)."""
    list_id = lists_api.configure(
        conn,
        body.name,
        description=body.description,
        double_opt_in=body.double_opt_in,
        from_addr=body.from_addr,
    )
    return _list(conn, list_id)


@router.get("/lists/{list_id}", tags=["lists"], response_model=s.ListInfo)
def get_list(conn: Db, list_id: ListId) -> s.ListInfo:
    return _list(conn, list_id)


@router.patch("/lists/{list_id}", tags=["lists"], response_model=s.ListInfo)
def set_list_options(conn: Db, list_id: ListId, body: s.ListOptions) -> s.ListInfo:
    """Rename (409 if the name is taken), describe, double opt-in (needs `from_addr`, who
    asks to confirm) or single opt-in; `public` opens or closes its sign-up form. One
    transaction: a refused field changes nothing."""
    _list(conn, list_id)  # 404 before anything is checked
    with conn.transaction():
        lists_api.change(
            conn,
            list_id,
            name=body.name,
            description=body.description,
            double_opt_in=body.double_opt_in,
            from_addr=body.from_addr,
        )
        signup.set_public(conn, list_id, body.public)
    return _list(conn, list_id)


@router.delete("/lists/{list_id}", tags=["lists"], response_model=s.Removed)
def delete_list(conn: Db, list_id: ListId) -> s.Removed:
    """Delete a list and its memberships (subscribers stay). 409 while a draft, scheduled,
    sending or paused campaign names it; sent and cancelled campaigns forget it."""
    return s.Removed(message=lists_api.delete(conn, list_id))


@router.get("/lists/{list_id}/form", tags=["lists"], response_model=s.SignupForm)
def get_signup_form(request: Request, conn: Db, list_id: ListId) -> s.SignupForm:
    """The list's HTML sign-up form (it works while the list is public)."""
    info = _view(conn, list_id)
    key, url = request.app.state.link_key, request.app.state.settings.public_url
    token, html = signup.form_token(key, list_id), signup.list_form(key, url, info)
    return s.SignupForm(list_id=list_id, public=info.public, token=token, html=html)


# -- imports --------------------------------------------------------------------------------


@router.post("/imports", tags=["lists"], response_model=s.ImportJob, status_code=202)
def start_import(
    request: Request,
    conn: Db,
    file: Annotated[UploadFile, File(description="CSV with a header row and an email column")],
    list_name: Annotated[
        str, Form(alias="list", min_length=1, max_length=200, pattern=r"^[^\x00]*$")
    ],
) -> s.ImportJob:
    """Upload a CSV (at most SENDDOCK_MAX_IMPORT_MB, else 413: web/guard.py); answered at
    once with a job to poll at /api/v1/imports/{id}."""
    handle, name = tempfile.mkstemp(prefix="senddock-import-", suffix=".csv")
    path = Path(name)
    with open(handle, "wb") as out:
        shutil.copyfileobj(file.file, out, 1024 * 1024)
    job_id = imports.start_import(request.app.state, list_name, path)
    return _import(conn, job_id)


def _import(conn: Conn, job_id: int) -> s.ImportJob:
    row = imports.get_import(conn, job_id)
    if row is None:
        raise NotFound(f"no import with id {job_id}")
    return s.ImportJob(**plain(row))


@router.get("/imports/{import_id}", tags=["lists"], response_model=s.ImportJob)
def get_import(conn: Db, import_id: Annotated[int, PathParam(ge=1, le=s.BIGINT)]) -> s.ImportJob:
    """An import's progress: status, rows read, imported, rejected (first lines kept)."""
    return _import(conn, import_id)


# -- campaigns ------------------------------------------------------------------------------


@router.get("/campaigns", tags=["campaigns"], response_model=s.CampaignPage)
def list_campaigns(
    conn: Db,
    status: Annotated[s.CampaignState | None, Query()] = None,
    page: PageNo = 1,
    per_page: PerPage = 50,
    archived: bool = False,
) -> s.CampaignPage:
    """Campaigns not archived (`archived=true`: the archived ones), newest first, with sent
    and failed counts."""
    offset = (page - 1) * per_page
    rows, total = queries.campaigns_page(conn, status, per_page, offset, archived)
    items = [s.CampaignSummary(**r) for r in rows]
    return s.CampaignPage(page=page, per_page=per_page, total=total, items=items)


@router.post("/campaigns", tags=["campaigns"], response_model=s.CampaignStatus, status_code=201)
def create_campaign(request: Request, conn: Db, body: s.CampaignIn) -> s.CampaignStatus:
    """A draft campaign; templates and headers are checked now (422 naming the field)."""
    if not body.text_body and not body.html_body and not body.markdown_body:
        raise Invalid("give text_body, html_body or markdown_body", field="text_body")
    if body.send_at is not None and body.send_at.tzinfo is None:
        raise Invalid("send_at needs a time zone (e.g. 2026-06-01T09:00+02:00)", field="send_at")
    _refuse_past(conn, body.send_at, "send_at")
    cid = campaigns.create_campaign(
        conn,
        name=body.name,
        list_name=body.lists,
        subject=body.subject,
        from_addr=body.from_addr,
        text_body=body.text_body,
        html_body=body.html_body,
        reply_to=body.reply_to,
        send_at=body.send_at,
        segment=body.segment,
        audience_filter=body.filter,
        layout=body.layout,
        markdown_body=body.markdown_body,
        track=campaigns.track_for(body.track, request.app.state.settings),
    )
    return _status(conn, cid)


@router.get("/campaigns/{campaign_id}", tags=["campaigns"], response_model=s.CampaignStatus)
def get_campaign(conn: Db, campaign_id: CampaignId, request: Request) -> s.CampaignStatus:
    """State and exact counts: the same keys as `senddock campaign status --json`."""
    lease = request.app.state.settings.lease_seconds
    return s.CampaignStatus(**campaigns.status(conn, campaign_id, lease).as_dict())


@router.patch("/campaigns/{campaign_id}", tags=["campaigns"], response_model=s.CampaignStatus)
def edit_campaign(
    request: Request, conn: Db, campaign_id: CampaignId, body: s.CampaignEdit
) -> s.CampaignStatus:
    """Change a draft, checked like create (422 naming the field); a campaign sent, sending or
    scheduled keeps what it sends (409 with the reason; its name may change)."""
    given = body.model_dump(exclude_unset=True)
    if "filter" in given:
        given["audience_filter"] = given.pop("filter")
    if given.get("track") is not None:
        given["track"] = campaigns.track_for(given["track"], request.app.state.settings)
    edits.edit(conn, campaign_id, edits.Changes(**given))
    return _status(conn, campaign_id)


@router.post(
    "/campaigns/{campaign_id}/clone",
    tags=["campaigns"],
    response_model=s.CampaignStatus,
    status_code=201,
)
def clone_campaign(
    conn: Db, campaign_id: CampaignId, body: s.CloneIn | None = None
) -> s.CampaignStatus:
    """A new draft with the message and lists of any campaign (a sent one too)."""
    return _status(conn, edits.clone(conn, campaign_id, body.name if body else None))


@router.delete("/campaigns/{campaign_id}", tags=["campaigns"], response_model=s.Removed)
def delete_campaign(conn: Db, campaign_id: CampaignId) -> s.Removed:
    """Delete a draft; any other campaign is 409 (archive a finished one)."""
    edits.delete(conn, campaign_id)
    return s.Removed(message=f"campaign {campaign_id} deleted")


@router.post(
    "/campaigns/{campaign_id}/archive", tags=["campaigns"], response_model=s.CampaignStatus
)
def archive_campaign(conn: Db, campaign_id: CampaignId) -> s.CampaignStatus:
    """Take a sent or cancelled campaign out of the default list (409 for any other)."""
    edits.archive(conn, campaign_id)
    return _status(conn, campaign_id)


@router.post(
    "/campaigns/{campaign_id}/unarchive", tags=["campaigns"], response_model=s.CampaignStatus
)
def unarchive_campaign(conn: Db, campaign_id: CampaignId) -> s.CampaignStatus:
    """Put an archived campaign back in the default list."""
    edits.archive(conn, campaign_id, archived=False)
    return _status(conn, campaign_id)


@router.get("/campaigns/{campaign_id}/preview", tags=["campaigns"], response_model=s.Preview)
def preview_campaign(
    request: Request,
    conn: Db,
    campaign_id: CampaignId,
    to: Annotated[str, Query(min_length=1, max_length=320, pattern=r"^[^\x00\r\n]*$")],
) -> s.Preview:
    """The message `to`, a subscriber on the campaign's lists, would get, rendered now."""
    data = compose.preview(conn, campaign_id, to, request.app.state.settings)
    msg = email.message_from_bytes(data, policy=email.policy.default)
    headers: dict[str, str] = {}
    for key, value in msg.items():
        headers[key] = f"{headers[key]}, {value}" if key in headers else str(value)
    parts: dict[str, str] = {}
    for part in msg.walk():
        if part.get_content_maintype() == "text" and isinstance(part, email.message.EmailMessage):
            parts.setdefault(part.get_content_subtype(), str(part.get_content()))
    return s.Preview(
        headers=headers,
        text=parts.get("plain"),
        html=parts.get("html"),
        raw=data.decode("utf-8", "replace"),
    )


@router.post("/campaigns/{campaign_id}/test", tags=["campaigns"], response_model=list[s.TestResult])
def test_campaign(
    request: Request, conn: Db, campaign_id: CampaignId, body: s.TestIn
) -> list[s.TestResult]:
    """Send the rendered message to these addresses now (no broadcast); the relay's replies."""
    state = request.app.state
    built = trial.build(conn, campaign_id, body.to, state.settings)
    results = oneoff.send(state.settings, built)
    return [s.TestResult(address=a, sent=r.accepted, reply=r.summary()) for a, r in results]


@router.post(
    "/campaigns/{campaign_id}/send", tags=["campaigns"], response_model=s.Sent, status_code=202
)
def send_campaign(request: Request, conn: Db, campaign_id: CampaignId) -> s.Sent:
    """Enqueue the campaign (idempotent; 409 once cancelled); workers send it. Poll GET
    /campaigns/{id}. `warning` says when no worker is live to send it."""
    bid, total, created = campaigns.broadcast(conn, campaign_id)
    live = live_workers(conn, request.app.state.settings.lease_seconds)
    return s.Sent(
        broadcast_id=bid,
        total=total,
        created=created,
        workers_live=live,
        warning=None if live else NO_WORKER,
    )


@router.post(
    "/campaigns/{campaign_id}/schedule", tags=["campaigns"], response_model=s.CampaignStatus
)
def schedule_campaign(conn: Db, campaign_id: CampaignId, body: s.ScheduleIn) -> s.CampaignStatus:
    """Send a draft at `send_at` (with a time zone; `at` is its deprecated old name); null
    unschedules."""
    at, field = body.when, body.field
    if at is not None and at.tzinfo is None:
        raise Invalid(f"{field} needs a time zone (e.g. 2026-06-01T09:00+02:00)", field=field)
    _refuse_past(conn, at, field)
    campaigns.schedule(conn, campaign_id, at)
    return _status(conn, campaign_id)


@router.post("/campaigns/{campaign_id}/pause", tags=["campaigns"], response_model=s.CampaignStatus)
def pause_campaign(conn: Db, campaign_id: CampaignId) -> s.CampaignStatus:
    """Stop new sends now; messages in flight finish."""
    campaigns.pause(conn, campaign_id)
    return _status(conn, campaign_id)


@router.post("/campaigns/{campaign_id}/resume", tags=["campaigns"], response_model=s.CampaignStatus)
def resume_campaign(conn: Db, campaign_id: CampaignId) -> s.CampaignStatus:
    campaigns.resume(conn, campaign_id)
    return _status(conn, campaign_id)


@router.post("/campaigns/{campaign_id}/cancel", tags=["campaigns"], response_model=s.Cancelled)
def cancel_campaign(conn: Db, campaign_id: CampaignId) -> s.Cancelled:
    """Cancel every message not yet sent; messages in flight finish."""
    done = campaigns.cancel_and_settle(conn, campaign_id)
    return s.Cancelled(
        cancelled=done.cancelled, in_flight=done.in_flight, campaign=_status(conn, campaign_id)
    )


@router.post("/campaigns/{campaign_id}/retry-failed", tags=["campaigns"], response_model=s.Requeued)
def retry_failed(conn: Db, campaign_id: CampaignId) -> s.Requeued:
    """Queue the failed recipients whose address is not suppressed again."""
    n = campaigns.retry_failed(conn, campaign_id)
    return s.Requeued(requeued=n, campaign=_status(conn, campaign_id))


@router.post(
    "/campaigns/{campaign_id}/resend-unconfirmed",
    tags=["campaigns"],
    response_model=s.UnconfirmedDone,
)
def resend_unconfirmed(
    conn: Db, campaign_id: CampaignId, body: s.UnconfirmedJobs | None = None
) -> s.UnconfirmedDone:
    """Send the unconfirmed recipients (or only the body's `jobs`) again (same Message-ID)."""
    n = campaigns.resend_unconfirmed(conn, campaign_id, body.jobs if body else None)
    return s.UnconfirmedDone(unconfirmed=n, campaign=_status(conn, campaign_id))


@router.post(
    "/campaigns/{campaign_id}/confirm", tags=["campaigns"], response_model=s.UnconfirmedDone
)
def confirm_unconfirmed(
    conn: Db, campaign_id: CampaignId, body: s.UnconfirmedJobs | None = None
) -> s.UnconfirmedDone:
    """Mark the unconfirmed recipients (or only the body's `jobs`) sent (the relay's log
    shows they went)."""
    n = campaigns.confirm(conn, campaign_id, body.jobs if body else None)
    return s.UnconfirmedDone(unconfirmed=n, campaign=_status(conn, campaign_id))


@router.post(
    "/campaigns/{campaign_id}/reconcile", tags=["campaigns"], response_model=s.ReconcileDone
)
def reconcile_unconfirmed(conn: Db, campaign_id: CampaignId, request: Request) -> s.ReconcileDone:
    """Ask the configured sources (the relay's log, providers' searches: SENDDOCK_RECONCILE_…)
    about the unconfirmed recipients: confirm those the relay accepted, send again those it
    provably never took, keep what each said of the rest (issue 41). 422 with no source."""
    settings = request.app.state.settings
    sources = reconcile.sources_from(settings, (), reconcile.sender_of(conn, campaign_id))
    done = reconcile.reconcile(conn, campaign_id, sources)
    return s.ReconcileDone(
        confirmed=done.count("confirmed"),
        resent=done.count("resent"),
        left=done.count("held"),
        campaign=_status(conn, campaign_id),
    )


@router.get("/unconfirmed", tags=["campaigns"], response_model=s.Unconfirmed)
def list_unconfirmed(
    conn: Db,
    per_campaign: Annotated[
        int, Query(ge=0, le=unconfirmed.SHOWN_JOBS, description="Jobs listed per campaign")
    ] = unconfirmed.SHOWN_JOBS,
) -> s.Unconfirmed:
    """Every campaign with unconfirmed recipients (their final dot went, no outcome was
    recorded), newest first: exact counts, the first jobs of each with what each source said
    at the last reconcile. Act on them per campaign (resend-unconfirmed, confirm, reconcile)."""
    return s.Unconfirmed(**plain(unconfirmed.waiting(conn, per_campaign)))


@router.get(
    "/campaigns/{campaign_id}/recipients", tags=["campaigns"], response_model=s.RecipientPage
)
def campaign_recipients(
    conn: Db,
    campaign_id: CampaignId,
    status: Annotated[JobStatus | None, Query()] = None,
    q: Search = None,
    page: PageNo = 1,
    per_page: PerPage = 50,
) -> s.RecipientPage:
    """Who got what: each recipient's outcome, filtered by status or failure, searched."""
    rows, total = queries.recipients_page(conn, campaign_id, status, q, page, per_page)
    items = [s.Recipient(**plain(r), reply=campaigns.reply_line(r)) for r in rows]
    return s.RecipientPage(page=page, per_page=per_page, total=total, items=items)


# -- bounces -----------------------------------------------------------------------------------


@router.get("/bounces", tags=["bounces"], response_model=s.BounceList)
def list_bounces(
    conn: Db,
    campaign_id: Annotated[int | None, Query(ge=1, le=s.BIGINT)] = None,
    kind: Annotated[s.BounceKind | None, Query()] = None,
    reason: Annotated[str | None, Query(pattern="^[a-z]{1,40}$")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> s.BounceList:
    """The newest bounce and complaint findings, with their kind and reason (userunknown,
    mailboxfull, blocked, feedback, …), as `senddock bounces list` shows them."""
    return s.BounceList(**plain(bounce_store.findings(conn, campaign_id, kind, limit, reason)))


# -- suppressions, workers ------------------------------------------------------------------


@router.get("/suppressions", tags=["suppressions"], response_model=list[s.Suppression])
def list_suppressions(
    conn: Db, reason: Annotated[s.Reason | None, Query()] = None
) -> list[s.Suppression]:
    """Every suppressed address, alphabetically."""
    return [s.Suppression(**plain(r)) for r in suppressions.rows(conn, reason)]


@router.post(
    "/suppressions", tags=["suppressions"], response_model=s.SuppressionAdded, status_code=201
)
def add_suppression(conn: Db, body: s.SuppressionIn) -> s.SuppressionAdded:
    """No broadcast sends to this address any more, including ones already enqueued."""
    added = suppressions.add(conn, body.email, body.reason, body.detail)
    return s.SuppressionAdded(email=normalize(body.email), added=added)


@router.delete(
    "/suppressions/{address}", tags=["suppressions"], response_model=s.SuppressionRemoved
)
def remove_suppression(
    conn: Db,
    address: Annotated[str, PathParam(min_length=1, max_length=320, pattern=r"^[^\x00]*$")],
) -> s.SuppressionRemoved:
    """Make an address sendable again (a bounced subscriber becomes active)."""
    return s.SuppressionRemoved(email=address, removed=suppressions.remove(conn, address))


@router.get("/workers", tags=["operations"], response_model=list[s.WorkerInfo])
def workers(conn: Db, request: Request) -> list[s.WorkerInfo]:
    """Registered workers, their heartbeat age (database clock), health and the jobs each
    holds."""
    lease = request.app.state.settings.lease_seconds
    return [s.WorkerInfo(**plain(w)) for w in list_workers(conn, lease)]
