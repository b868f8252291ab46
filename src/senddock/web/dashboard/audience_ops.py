"""Everyday audience operations on the dashboard that have no page of their own: deleting a
list (a button on its page), and the CSV downloads of the subscribers page (the list and
filter it shows) and of a campaign's recipients with their outcomes. Changes go through
audience.lists; a refusal is flashed on the page the button was on, and changes nothing.
The downloads are the API's (web/downloads.py), behind the dashboard session."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from starlette.requests import Request
from starlette.responses import Response

from senddock.audience import lists
from senddock.audience.export import export_subscribers
from senddock.audience.segment_filter import MAX_LENGTH
from senddock.campaigns.campaigns import FAILURES, JOB_STATUSES
from senddock.campaigns.recipients import write_csv
from senddock.errors import NotFound, SendDockError
from senddock.web.dashboard.gate import LoggedIn
from senddock.web.dashboard.views import PAGE_HEADERS, db, flash, redirect
from senddock.web.downloads import csv_download

router = APIRouter(include_in_schema=False, route_class=LoggedIn)


@router.post("/lists/{list_id:int}/delete")
def delete_list(request: Request, list_id: int) -> Response:
    with db(request) as conn:
        try:
            said = lists.delete(conn, list_id)
        except NotFound:
            raise
        except SendDockError as exc:
            flash(request, exc.message, "error")
            return redirect(f"/lists/{list_id}")
    flash(request, said[0].upper() + said[1:] + ".")
    return redirect("/lists")


@router.get("/subscribers/export.csv")
def export_subscribers_csv(
    request: Request,
    list_name: Annotated[str, Query(alias="list", max_length=200)] = "",
    filter_text: Annotated[str, Query(alias="filter", max_length=MAX_LENGTH)] = "",
) -> Response:
    with db(request) as conn:
        sent = csv_download(
            lambda out: export_subscribers(conn, out, list_name or None, filter_text or None),
            "subscribers.csv",
        )
    sent.headers.update(PAGE_HEADERS)
    return sent


@router.get("/campaigns/{campaign_id:int}/recipients.csv")
def recipients_csv(request: Request, campaign_id: int, status: str = "") -> Response:
    wanted = status if status in JOB_STATUSES + FAILURES else None
    with db(request) as conn:
        sent = csv_download(
            lambda out: write_csv(conn, campaign_id, wanted, out), f"campaign-{campaign_id}.csv"
        )
    sent.headers.update(PAGE_HEADERS)
    return sent
