"""Everyday audience operations on the dashboard that have no page of their own: deleting a
list (a button on its page). Changes go through audience.lists; a refusal is flashed on the
page the button was on, and changes nothing."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from senddock.audience import lists
from senddock.errors import NotFound, SendDockError
from senddock.web.dashboard.gate import LoggedIn
from senddock.web.dashboard.views import db, flash, redirect

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
