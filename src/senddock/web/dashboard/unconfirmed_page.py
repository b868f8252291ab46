"""The unconfirmed recipients of every campaign on one page (issue 41, item 3), with one action
for all that remain and "Ask the relay" for every campaign at once.

Everything is campaigns.unconfirmed's; this module shows it and says what was done. The resend
form carries what the page offered (how many, and the fingerprint of their ids), so a job
that turned unconfirmed after the page was drawn is never resent unseen.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form
from starlette.requests import Request
from starlette.responses import Response

from senddock.campaigns import unconfirmed
from senddock.errors import SendDockError
from senddock.web.dashboard.gate import LoggedIn
from senddock.web.dashboard.views import db, flash, redirect, render
from senddock.words import plural

router = APIRouter(include_in_schema=False, route_class=LoggedIn)

PAGE = "/unconfirmed"


@router.get(PAGE)
def unconfirmed_page(request: Request) -> Response:
    with db(request) as conn:
        waiting = unconfirmed.waiting(conn)
    return render(request, "unconfirmed.html", title="Unconfirmed", w=waiting)


@router.post(PAGE + "/resend")
def resend_all(
    request: Request,
    seen: Annotated[int, Form()] = -1,
    fingerprint: Annotated[str, Form(max_length=64)] = "",
) -> Response:
    """The one action: resend every unconfirmed recipient the page offered, or nobody."""
    with db(request) as conn:
        try:
            done = unconfirmed.resend_seen(conn, seen, fingerprint)
        except SendDockError as exc:
            flash(request, exc.message, "error")
            return redirect(PAGE)
    if not done.recipients:
        flash(request, "No unconfirmed recipient to resend.")
        return redirect(PAGE)
    said = (
        f"{plural(done.recipients, 'unconfirmed recipient')} of"
        f" {plural(done.campaigns, 'campaign')} queued again."
    )
    if done.paused:
        said += f" {done.paused} of them wait for their paused campaign to be resumed."
    flash(request, said)
    return redirect(PAGE)


@router.post(PAGE + "/reconcile")
def reconcile_all(request: Request) -> Response:
    """Ask the relay about every campaign's unconfirmed recipients (each campaign's reconcile)."""
    with db(request) as conn:
        try:
            asked = unconfirmed.reconcile_all(conn, request.app.state.settings)
        except SendDockError as exc:
            flash(request, exc.message, "error")
            return redirect(PAGE)
    confirmed, resent, held = (
        sum(r.count(outcome) for r in asked) for outcome in ("confirmed", "resent", "held")
    )
    flash(
        request,
        f"Asked the relay about {plural(len(asked), 'campaign')}: {confirmed} confirmed sent,"
        f" {resent} queued again, {held} left (no source could tell).",
    )
    return redirect(PAGE)
