"""The workers page: every registered worker with its heartbeat, live through /events/workers."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from senddock.delivery.rescuer import deaths, list_workers
from senddock.web.dashboard.gate import LoggedIn
from senddock.web.dashboard.live import worker_row
from senddock.web.dashboard.views import db, render

router = APIRouter(include_in_schema=False, route_class=LoggedIn)


@router.get("/workers")
def workers(request: Request) -> Response:
    lease = float(request.app.state.settings.lease_seconds)
    with db(request) as conn:
        rows = [worker_row(r) for r in list_workers(conn, lease)]
        died = deaths(conn, limit=20)
    return render(request, "workers.html", title="Workers", workers=rows, lease=lease, deaths=died)
