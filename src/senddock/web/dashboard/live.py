"""Server-Sent Events: the numbers the pages show, pushed about every second without reload.

Each stream reads the database in a worker thread on its period and sends one JSON event;
static/dashboard.js puts the values into the page. A stream ends when the browser goes away
(sse-starlette notices the disconnect) or when what it watches is finished.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from fastapi import APIRouter
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from senddock import campaigns
from senddock.delivery.rescuer import list_workers
from senddock.web import imports
from senddock.web.dashboard import queries
from senddock.web.dashboard.campaign_pages import live_state
from senddock.web.dashboard.gate import LoggedIn
from senddock.web.dashboard.views import Page, db

log = logging.getLogger("senddock.web.dashboard")
router = APIRouter(include_in_schema=False, route_class=LoggedIn)

CAMPAIGN_KEYS = ("id", "status", "total", "sent", "failed", "cancelled", "done", "percent")
# Keep-alive comments, so proxies do not close a quiet stream.
PING_SECONDS = 15
# On shutdown, streams get this long to end cleanly before they are cut.
SHUTDOWN_GRACE = 2.0
IMPORT_DONE = ("done", "failed")


def _event(name: str, data: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps(data, default=str), event=name)


async def _every(
    seconds: float,
    read: Callable[[int], dict[str, Any] | None],
    name: str,
    stop: anyio.Event,
) -> AsyncIterator[ServerSentEvent]:
    """Call read(tick) in a thread every `seconds` and send what it returns, until it returns
    None or the server shuts down (`stop`; the stream then ends cleanly). A failed read (the
    database restarting) is logged and skipped, not fatal."""
    tick = 0
    while not stop.is_set():
        try:
            data = await run_in_threadpool(read, tick)
        except Exception:
            log.warning("live %s read failed", name, exc_info=True)
        else:
            if data is None:
                return
            yield _event(name, data)
        tick += 1
        with anyio.move_on_after(seconds):
            await stop.wait()


def stream(
    seconds: float, read: Callable[[int], dict[str, Any] | None], name: str
) -> EventSourceResponse:
    """An event stream of read() every `seconds`, named `name`."""
    stop = anyio.Event()
    return EventSourceResponse(
        _every(seconds, read, name, stop),
        ping=PING_SECONDS,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        shutdown_event=stop,
        shutdown_grace_period=SHUTDOWN_GRACE,
    )


@router.get("/events/campaigns")
async def campaign_list_events(request: Request, page: str = "1") -> Response:
    """The counts and progress of the campaigns on a page of the list."""
    at = Page.of(page)

    def read(_: int) -> dict[str, Any]:
        with db(request) as conn:
            rows = queries.campaigns_page(conn, at.size, at.offset)
        return {"campaigns": [{k: r[k] for k in CAMPAIGN_KEYS} for r in rows]}

    return stream(1.0, read, "campaigns")


@router.get("/events/campaigns/{campaign_id}")
async def campaign_events(request: Request, campaign_id: int) -> Response:
    """One campaign's status, counts, progress and send rate; the chart every 2 seconds."""

    def read(tick: int) -> dict[str, Any] | None:
        with db(request) as conn:
            try:
                state = live_state(conn, campaign_id, chart=tick % 2 == 0)
            except campaigns.UnknownCampaign:
                return None
        return state

    return stream(1.0, read, "campaign")


@router.get("/events/imports/{job_id}")
async def import_events(request: Request, job_id: int) -> Response:
    """An import's progress, until it is done or failed (then one last event)."""
    finished = False

    def read(_: int) -> dict[str, Any] | None:
        nonlocal finished
        if finished:
            return None
        with db(request) as conn:
            job = imports.get_import(conn, job_id)
        if job is None:
            return None
        finished = job["status"] in IMPORT_DONE
        return dict(job)

    return stream(0.5, read, "import")


@router.get("/events/workers")
async def worker_events(request: Request) -> Response:
    """The registered workers with heartbeat ages, every 2 seconds."""
    lease = float(request.app.state.settings.lease_seconds)

    def read(_: int) -> dict[str, Any]:
        with db(request) as conn:
            rows = list_workers(conn)
        return {"workers": [worker_row(r, lease) for r in rows]}

    return stream(2.0, read, "workers")


def worker_row(row: dict[str, Any], lease: float) -> dict[str, Any]:
    """A worker as the page shows it; `health` is live, late (half a lease) or silent."""
    age = float(row["heartbeat_age"] or 0.0)
    health = "live" if age < lease / 2 else "late" if age < lease else "silent"
    if row["stopping"]:
        health = "stopping"
    return {**row, "heartbeat_age": round(age, 1), "health": health}
