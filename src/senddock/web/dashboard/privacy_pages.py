"""A subscriber's consent record, and deleting or erasing them, on the dashboard
(`/subscribers/<id>/privacy`). Reads through audience.consent, changes through
audience.subscribers (delete) and audience.erasure (erase); a refused change shows its line on
the page, with its status, and changes nothing."""

from __future__ import annotations

import io
from typing import Annotated

from fastapi import APIRouter, Form
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from senddock.audience import consent, erasure, subscribers
from senddock.errors import Invalid, NotFound, SendDockError
from senddock.web import queries
from senddock.web.dashboard.gate import LoggedIn
from senddock.web.dashboard.views import PAGE_HEADERS, db, flash, redirect, render

router = APIRouter(include_in_schema=False, route_class=LoggedIn)


def _page(request: Request, subscriber_id: int, error: str = "", status: int = 200) -> Response:
    with db(request) as conn:
        found = queries.subscriber(conn, subscriber_id)
        if found is None:
            raise NotFound(f"There is no subscriber {subscriber_id}.")
        record = consent.record(conn, subscriber_id, found["email"])
    return render(
        request,
        "subscriber_privacy.html",
        status,
        title=f"Consent and erasure: {found['email']}",
        s=found,
        record=record,
        error=error,
    )


@router.get("/subscribers/{subscriber_id:int}/privacy")
def privacy_page(request: Request, subscriber_id: int) -> Response:
    return _page(request, subscriber_id)


def _record(request: Request, subscriber_id: int) -> consent.ConsentRecord:
    with db(request) as conn:
        email = queries.subscriber_email(conn, subscriber_id)
        if email is None:
            raise NotFound(f"There is no subscriber {subscriber_id}.")
        return consent.record(conn, subscriber_id, email)


@router.get("/subscribers/{subscriber_id:int}/consent.csv")
def consent_csv(request: Request, subscriber_id: int) -> Response:
    out = io.StringIO()
    _record(request, subscriber_id).write_csv(out)
    disposition = f'attachment; filename="consent-{subscriber_id}.csv"'
    headers = {**PAGE_HEADERS, "Content-Disposition": disposition}
    return Response(out.getvalue(), media_type="text/csv; charset=utf-8", headers=headers)


@router.get("/subscribers/{subscriber_id:int}/consent.json")
def consent_json(request: Request, subscriber_id: int) -> Response:
    disposition = f'attachment; filename="consent-{subscriber_id}.json"'
    headers = {**PAGE_HEADERS, "Content-Disposition": disposition}
    return JSONResponse(_record(request, subscriber_id).as_json(), headers=headers)


@router.post("/subscribers/{subscriber_id:int}/delete")
def delete_subscriber(request: Request, subscriber_id: int) -> Response:
    with db(request) as conn:
        email = queries.subscriber_email(conn, subscriber_id)
        if email is None:
            raise NotFound(f"There is no subscriber {subscriber_id}.")
        said = subscribers.remove(conn, email)
        still = queries.subscriber(conn, subscriber_id) is not None
    flash(request, said + ".")
    return redirect(f"/subscribers/{subscriber_id}" if still else "/subscribers")


@router.post("/subscribers/{subscriber_id:int}/erase")
def erase_subscriber(
    request: Request,
    subscriber_id: int,
    confirm: Annotated[str, Form()] = "",
    keep_suppressed: Annotated[str, Form()] = "",
) -> Response:
    with db(request) as conn:
        email = queries.subscriber_email(conn, subscriber_id)
        if email is None:
            raise NotFound(f"There is no subscriber {subscriber_id}.")
        try:
            if confirm.strip().lower() != email.lower():
                raise Invalid("Type their address exactly to confirm.", field="confirm")
            done = erasure.erase(conn, email, keep_suppressed=bool(keep_suppressed))
        except NotFound:
            raise
        except SendDockError as exc:
            error, status = exc.message, exc.status
        else:
            error, status = "", 200
    if error:
        return _page(request, subscriber_id, error, status)
    flash(request, done.summary(email))
    return redirect("/subscribers")
