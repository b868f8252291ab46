"""Changing a campaign from the dashboard (issue 22): the edit form, the clone, delete and
archive buttons, the schedule field and the "send a test" form. Every change goes through
campaigns/edits.py, campaigns.schedule or the trial send, and what they refuse is shown in
one line, as create's errors are."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form
from starlette.requests import Request
from starlette.responses import Response

from senddock import campaigns
from senddock.audience.lists import all_lists
from senddock.audience.segments import all_segments as saved_segments
from senddock.campaigns import edits, trial
from senddock.campaigns.layouts import NO_LAYOUT, list_layouts
from senddock.campaigns.listing import CampaignDetail, show
from senddock.delivery import oneoff
from senddock.errors import Invalid, NotFound, SendDockError
from senddock.web.dashboard.gate import LoggedIn
from senddock.web.dashboard.views import Conn, db, flash, not_found, redirect, render

router = APIRouter(include_in_schema=False, route_class=LoggedIn)

# The schedule field's shape (an HTML datetime-local input): minutes, no zone.
LOCAL = "%Y-%m-%dT%H:%M"


def send_time(conn: Conn, text: str) -> datetime | None:
    """The form's schedule field as a time: read in the database's time zone, the zone every
    dashboard time is shown in; None when empty. Invalid (about `send_at`) if it is not one,
    or if it has passed."""
    if not text.strip():
        return None
    try:
        at = datetime.strptime(text.strip(), LOCAL).replace(tzinfo=conn.info.timezone)
    except ValueError as exc:
        raise Invalid(f"not a time: {text!r} (e.g. 2026-06-01T09:00)", field="send_at") from exc
    try:
        campaigns.refuse_past(conn, at)
    except campaigns.SendTimeInPast as exc:
        raise Invalid(str(exc), field="send_at") from exc
    return at


def shown_time(value: datetime | None) -> str:
    """A stored send time as the schedule field shows it (the database's zone)."""
    return value.strftime(LOCAL) if value else ""


def campaign_form(
    name: Annotated[str, Form()] = "",
    lists: Annotated[list[str] | None, Form()] = None,
    subject: Annotated[str, Form()] = "",
    from_addr: Annotated[str, Form()] = "",
    reply_to: Annotated[str, Form()] = "",
    send_at: Annotated[str, Form()] = "",
    text_body: Annotated[str, Form()] = "",
    html_body: Annotated[str, Form()] = "",
    markdown_body: Annotated[str, Form()] = "",
    layout: Annotated[str, Form()] = "",
    segment: Annotated[str, Form()] = "",
    audience_filter: Annotated[str, Form(alias="filter")] = "",
) -> dict[str, Any]:
    """The campaign form's fields as submitted, tidied (browsers send CRLF in textareas): the
    new-campaign and the edit form alike (a route's dependency)."""
    return {
        "name": name.strip(),
        "lists": [n for n in (lists or []) if n],
        "subject": subject,
        "from_addr": from_addr.strip(),
        "reply_to": reply_to.strip(),
        "send_at": send_at.strip(),
        "text_body": text_body.replace("\r\n", "\n"),
        "html_body": html_body.replace("\r\n", "\n"),
        "markdown_body": markdown_body.replace("\r\n", "\n"),
        "layout": layout,
        "segment": segment.strip(),
        "filter": audience_filter.strip(),
    }


CampaignForm = Annotated[dict[str, Any], Depends(campaign_form)]


def _page(
    request: Request,
    conn: Conn,
    c: CampaignDetail,
    form: dict[str, Any],
    error: str,
    status: int = 200,
) -> Response:
    return render(
        request,
        "campaign_new.html",
        status,
        title=f"Edit {c.name}",
        heading=f"Edit “{c.name}”",
        action=f"/campaigns/{c.id}/edit",
        campaign=c,
        lists=all_lists(conn),
        layouts=list_layouts(conn),
        segments=saved_segments(conn),
        form=form,
        error=error,
    )


def _stored(conn: Conn, campaign_id: int) -> tuple[CampaignDetail, dict[str, Any]] | None:
    """(the campaign's fields, its form as stored); None if there is no such campaign."""
    try:
        c = show(conn, campaign_id)
    except NotFound:
        return None
    row = edits.current(conn, campaign_id)
    assert row is not None
    form = {
        "name": c.name,
        "lists": list(c.lists),
        "subject": c.subject,
        "from_addr": c.from_addr,
        "reply_to": c.reply_to or "",
        "send_at": shown_time(c.send_at),
        "text_body": row.text_body or "",
        "html_body": row.html_body or "",
        "markdown_body": row.markdown_body or "",
        "layout": row.layout_name or NO_LAYOUT,
        "segment": row.segment_name or "",
        "filter": row.audience_filter or "",
    }
    return c, form


@router.get("/campaigns/{campaign_id}/edit")
def edit_form(request: Request, campaign_id: int) -> Response:
    with db(request) as conn:
        stored = _stored(conn, campaign_id)
        if stored is None:
            return not_found(request, f"There is no campaign {campaign_id}.")
        return _page(request, conn, stored[0], stored[1], "")


@router.post("/campaigns/{campaign_id}/edit")
def edit(request: Request, campaign_id: int, form: CampaignForm) -> Response:
    with db(request) as conn:
        stored = _stored(conn, campaign_id)
        if stored is None:
            return not_found(request, f"There is no campaign {campaign_id}.")
        c, before = stored
        try:
            changed = _save(conn, campaign_id, form, before)
        except SendDockError as exc:
            return _page(request, conn, c, form, exc.message, 409 if exc.status == 409 else 422)
    flash(request, f"Saved: changed {edits.said(changed)}." if changed else "Nothing changed.")
    return redirect(f"/campaigns/{campaign_id}")


# The form's fields an edit compares with the stored ones (lists and schedule apart).
EDITED = edits.TEXTS + tuple(edits.FIELDS.values())


def _save(conn: Conn, campaign_id: int, form: dict[str, Any], before: dict[str, Any]) -> list[str]:
    """Apply the form: unschedule first (an edit of a scheduled draft is refused), then the
    fields, then the new time; the fields that changed."""
    moved = form["send_at"] != before["send_at"]
    at = send_time(conn, form["send_at"]) if moved else None
    if moved and at is None:
        campaigns.schedule(conn, campaign_id, None)
    # A field as it was stored is no change, whatever its line ends (a body given to the CLI
    # with CRLF comes back from the browser with LF): a sent campaign's rename stays a rename.
    same = {
        k: form[k] == (before[k].replace("\r\n", "\n") if isinstance(before[k], str) else before[k])
        for k in EDITED
    }
    given = {k: None if same[k] else form[k] for k in same}
    changes = edits.Changes(
        **{k: v for k, v in given.items() if k != "filter"},
        audience_filter=given["filter"],
        lists=form["lists"],
    )
    changed = edits.edit(conn, campaign_id, changes)
    if at is not None:
        campaigns.schedule(conn, campaign_id, at)
    return changed + (["schedule"] if moved else [])


def _act(request: Request, campaign_id: int, go: Any, then: str) -> Response:
    """Run a button's change; flash what it did (or why not) and go to `then`."""
    with db(request) as conn:
        try:
            said, where = go(conn)
            flash(request, said)
            return redirect(where)
        except NotFound:
            return not_found(request, f"There is no campaign {campaign_id}.")
        except SendDockError as exc:
            flash(request, exc.message, "error")
    return redirect(then)


@router.post("/campaigns/{campaign_id}/clone")
def clone(request: Request, campaign_id: int) -> Response:
    def go(conn: Conn) -> tuple[str, str]:
        new = edits.clone(conn, campaign_id)
        return "Cloned into this new draft: change what you like, then send it.", (
            f"/campaigns/{new}/edit"
        )

    return _act(request, campaign_id, go, f"/campaigns/{campaign_id}")


@router.post("/campaigns/{campaign_id}/delete")
def delete(request: Request, campaign_id: int) -> Response:
    def go(conn: Conn) -> tuple[str, str]:
        edits.delete(conn, campaign_id)
        return f"Draft {campaign_id} deleted.", "/"

    return _act(request, campaign_id, go, f"/campaigns/{campaign_id}")


@router.post("/campaigns/{campaign_id}/archive")
def archive(request: Request, campaign_id: int) -> Response:
    def go(conn: Conn) -> tuple[str, str]:
        edits.archive(conn, campaign_id)
        return "Archived: it is listed under Archived now.", f"/campaigns/{campaign_id}"

    return _act(request, campaign_id, go, f"/campaigns/{campaign_id}")


@router.post("/campaigns/{campaign_id}/unarchive")
def unarchive(request: Request, campaign_id: int) -> Response:
    def go(conn: Conn) -> tuple[str, str]:
        edits.archive(conn, campaign_id, archived=False)
        return "Back in the campaign list.", f"/campaigns/{campaign_id}"

    return _act(request, campaign_id, go, f"/campaigns/{campaign_id}")


@router.post("/campaigns/{campaign_id}/test")
def test_send(request: Request, campaign_id: int, to: Annotated[str, Form()] = "") -> Response:
    """Send the saved campaign to one address now (campaigns/trial.py), no broadcast."""
    settings = request.app.state.settings
    back = f"/campaigns/{campaign_id}/edit"

    def go(conn: Conn) -> tuple[str, str]:
        if not to.strip():
            raise Invalid("Give an address to send the test to.", field="to")
        [(address, reply)] = oneoff.send(settings, trial.build(conn, campaign_id, [to], settings))
        if reply.accepted:
            return f"Test sent to {address} ({reply.summary()}).", back
        raise Invalid(f"The test to {address} was not accepted: {reply.summary()}", field="to")

    return _act(request, campaign_id, go, back)
