"""Campaign pages: the list, one campaign with its recipients, the new-campaign form, and the
buttons (send, pause, resume, cancel, retry failed). Every change goes through campaigns.*."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Form
from starlette.requests import Request
from starlette.responses import Response

from senddock import campaigns
from senddock.audience.lists import all_lists
from senddock.audience.segments import all_segments as saved_segments
from senddock.campaigns import reconcile
from senddock.campaigns.audience import preview_count
from senddock.campaigns.campaigns import FAILURES, JOB_STATUSES
from senddock.campaigns.layouts import list_layouts
from senddock.campaigns.recipients import RecipientRow
from senddock.campaigns.recipients import page as recipients_page
from senddock.campaigns.workers import send_warning
from senddock.errors import Conflict, NotFound, SendDockError
from senddock.messages.render import address_count
from senddock.web import queries
from senddock.web.dashboard.campaign_edit import CampaignForm, campaign_form, send_time
from senddock.web.dashboard.chart import sent_per_minute_svg
from senddock.web.dashboard.gate import LoggedIn
from senddock.web.dashboard.overview import audience_svg, overview
from senddock.web.dashboard.views import Conn, Page, db, flash, not_found, redirect, render
from senddock.web.queries import like
from senddock.words import plural

router = APIRouter(include_in_schema=False, route_class=LoggedIn)

LIVE = ("sending", "paused")
FILTERS = JOB_STATUSES + FAILURES


@router.get("/")
def campaign_list(request: Request, page: str = "1", archived: str = "") -> Response:
    at = Page.of(page)
    with db(request) as conn:
        rows, _ = queries.campaigns_page(conn, None, at.limit, at.offset, bool(archived))
        # The home page's overview: on the list of campaigns, not on the archive's.
        seen = None if archived else overview(conn, request.app.state.settings.lease_seconds)
    return render(
        request,
        "campaigns.html",
        title="Archived campaigns" if archived else "Campaigns",
        campaigns=rows[: at.size],
        page=at.number,
        more=len(rows) > at.size,
        archived=bool(archived),
        overview=seen,
        audience=audience_svg(seen) if seen else "",
    )


def live_state(conn: Conn, campaign_id: int, lease: float, chart: bool = True) -> dict[str, Any]:
    """Status, exact counts, progress, send rate and (with `chart`) the chart's SVG: what the
    campaign page shows and what its event stream pushes."""
    st = campaigns.status(conn, campaign_id, lease)  # UnknownCampaign
    state = {**st.as_dict(), "done": st.done, "percent": st.percent}
    bid = st.broadcast_id
    state["rate"] = queries.rate(conn, bid) if bid else 0
    state["complaint_percent"] = f"{state['complaint_rate'] * 100:.2f}"
    if chart:
        series = queries.per_minute(conn, bid, state["status"] in LIVE) if bid else []
        state["chart"] = sent_per_minute_svg(series)
    return state


@router.get("/campaigns/new")
def new_campaign_form(request: Request) -> Response:
    with db(request) as conn:
        lists = all_lists(conn)
        saved = saved_segments(conn)
        layout_rows = list_layouts(conn)
    form = campaign_form(lists=[])
    return render(
        request,
        "campaign_new.html",
        title="New campaign",
        lists=lists,
        layouts=layout_rows,
        form=form,
        error="",
        segments=saved,
    )


@router.post("/campaigns")
def create_campaign(request: Request, form: CampaignForm) -> Response:
    error = _missing(form)
    with db(request) as conn:
        if not error:
            try:
                cid = campaigns.create_campaign(
                    conn,
                    name=form["name"],
                    list_name=form["lists"],
                    subject=form["subject"],
                    from_addr=form["from_addr"],
                    text_body=form["text_body"] or None,
                    html_body=form["html_body"] or None,
                    segment=form["segment"] or None,
                    audience_filter=form["filter"] or None,
                    markdown_body=form["markdown_body"] or None,
                    layout=form["layout"] or None,
                    reply_to=form["reply_to"] or None,
                    send_at=send_time(conn, form["send_at"]),
                    # SENDDOCK_TRACK and SENDDOCK_TRACK_ANONYMOUS (issue 37)
                    track=campaigns.track_for(None, request.app.state.settings),
                )
            except SendDockError as exc:
                error = exc.message
            else:
                flash(request, f"Campaign “{form['name']}” saved as a draft. Send it when ready.")
                return redirect(f"/campaigns/{cid}")
        lists_ = all_lists(conn)
        saved = saved_segments(conn)
        layout_rows = list_layouts(conn)
    return render(
        request,
        "campaign_new.html",
        422,
        title="New campaign",
        lists=lists_,
        layouts=layout_rows,
        form=form,
        error=error,
        segments=saved,
    )


def _missing(form: dict[str, Any]) -> str:
    """The first required field left empty, as a sentence; '' if none."""
    for field, label in (("name", "a name"), ("subject", "a subject"), ("from_addr", "a From")):
        if not form[field].strip():
            return f"The campaign needs {label}."
    if address_count(form["from_addr"]) > 1:
        return "Give one From address, not several."
    if not form["lists"]:
        return "Choose at least one list."
    if not any(form[f].strip() for f in ("text_body", "html_body", "markdown_body")):
        return "The campaign needs a text body, an HTML body or a Markdown body."
    return ""


@router.get("/campaigns/{campaign_id}")
def campaign_page(
    request: Request, campaign_id: int, status: str = "", q: str = "", page: str = "1"
) -> Response:
    at = Page.of(page)
    shown = status if status in FILTERS else ""
    with db(request) as conn:
        about = queries.campaign(conn, campaign_id)
        if about is None:
            return not_found(request, f"There is no campaign {campaign_id}.")
        state = live_state(conn, campaign_id, request.app.state.settings.lease_seconds)
        rows: list[RecipientRow] = []
        if about["broadcast_id"]:
            rows = recipients_page(
                conn, about["broadcast_id"], shown or None, like(q), at.limit, at.offset
            )
    return render(
        request,
        "campaign.html",
        title=about["name"],
        c=about,
        s=state,
        recipients=rows[: at.size],
        filters=FILTERS,
        status=shown,
        q=q,
        page=at.number,
        more=len(rows) > at.size,
    )


def _act(request: Request, campaign_id: int, action: Callable[[Conn], str]) -> Response:
    """Run a button's action; its outcome (or why it could not be done) is flashed."""
    with db(request) as conn:
        try:
            flash(request, action(conn))
        except NotFound:
            return not_found(request, f"There is no campaign {campaign_id}.")
        except SendDockError as exc:
            flash(request, exc.message, "error")
    return redirect(f"/campaigns/{campaign_id}")


@router.post("/campaigns/{campaign_id}/send")
def send(request: Request, campaign_id: int) -> Response:
    lease = float(request.app.state.settings.lease_seconds)

    def go(conn: Conn) -> str:
        _, _, created = campaigns.broadcast(conn, campaign_id)
        # The whole audience, not the first enqueue chunk ("969" of 1,954, issue 35).
        whole = plural(preview_count(conn, campaign_id), "recipient") if created else ""
        said = f"Sending to {whole}." if created else "Already sent."
        warning = send_warning(conn, lease)
        return f"{said} Note: {warning}." if warning else said

    return _act(request, campaign_id, go)


@router.post("/campaigns/{campaign_id}/pause")
def pause(request: Request, campaign_id: int) -> Response:
    def go(conn: Conn) -> str:
        campaigns.pause(conn, campaign_id)
        return "Paused: no new messages start; those in flight finish."

    return _act(request, campaign_id, go)


@router.post("/campaigns/{campaign_id}/resume")
def resume(request: Request, campaign_id: int) -> Response:
    def go(conn: Conn) -> str:
        campaigns.resume(conn, campaign_id)
        return "Resumed."

    return _act(request, campaign_id, go)


@router.post("/campaigns/{campaign_id}/cancel")
def cancel(request: Request, campaign_id: int) -> Response:
    def go(conn: Conn) -> str:
        done = campaigns.cancel_and_settle(conn, campaign_id)
        return (
            f"Cancelled: {plural(done.cancelled, 'message')} will not go; {done.in_flight} in"
            f" flight when cancelled (their outcome still lands); {done.sent} sent."
        )

    return _act(request, campaign_id, go)


@router.post("/campaigns/{campaign_id}/resend-unconfirmed")
def resend_unconfirmed(request: Request, campaign_id: int) -> Response:
    def go(conn: Conn) -> str:
        n = campaigns.resend_unconfirmed(conn, campaign_id)
        return f"{n} unconfirmed recipients queued again." if n else "No unconfirmed recipient."

    return _act(request, campaign_id, go)


@router.post("/campaigns/{campaign_id}/confirm")
def confirm(request: Request, campaign_id: int) -> Response:
    def go(conn: Conn) -> str:
        n = campaigns.confirm(conn, campaign_id)
        return f"{n} unconfirmed recipients confirmed sent." if n else "No unconfirmed recipient."

    return _act(request, campaign_id, go)


@router.post("/campaigns/{campaign_id}/reconcile")
def reconcile_unconfirmed(request: Request, campaign_id: int) -> Response:
    """Issue 41: ask the configured sources about the unconfirmed recipients."""
    settings = request.app.state.settings

    def go(conn: Conn) -> str:
        sources = reconcile.sources_from(settings, (), reconcile.sender_of(conn, campaign_id))
        done = reconcile.reconcile(conn, campaign_id, sources)
        return (
            f"Asked the relay: {done.count('confirmed')} confirmed sent,"
            f" {done.count('resent')} queued again, {done.count('held')} left"
            " (no source could tell)."
        )

    return _act(request, campaign_id, go)


@router.post("/campaigns/{campaign_id}/resend-unseen")
def resend_unseen(
    request: Request, campaign_id: int, seen: Annotated[int, Form()] = -1
) -> Response:
    """Issue 41: the one action for every recipient still unconfirmed (after "Ask the relay":
    those no source saw): resend them, only if they are still the `seen` the page showed (one
    more since would go unseen). The button says "still unconfirmed", not "that no source saw",
    because it is there before any source was asked too."""

    def go(conn: Conn) -> str:
        now = campaigns.status(conn, campaign_id).counts.unconfirmed
        if now != seen:
            raise Conflict(
                f"The unconfirmed recipients changed ({seen} shown, {now} now): look again."
            )
        n = campaigns.resend_unconfirmed(conn, campaign_id)
        return f"{n} unconfirmed recipients queued again."

    return _act(request, campaign_id, go)


@router.post("/campaigns/{campaign_id}/retry-failed")
def retry_failed(request: Request, campaign_id: int) -> Response:
    def go(conn: Conn) -> str:
        n = campaigns.retry_failed(conn, campaign_id)
        return f"{n} failed recipients queued again." if n else "No failed recipient to retry."

    return _act(request, campaign_id, go)
