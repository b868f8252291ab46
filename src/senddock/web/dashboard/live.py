"""Server-Sent Events: the numbers the pages show, pushed about every second without reload.

Each stream reads the database in a worker thread on its period and sends one JSON event;
static/dashboard.js puts the values into the page. A stream ends when the browser goes away
(sse-starlette notices the disconnect), when what it watches is finished, or after
SENDDOCK_STREAM_SECONDS (the browser's EventSource then reconnects by itself). One session
from one address holds at most SENDDOCK_STREAMS_PER_SESSION streams at once; one more is
answered 429 (each holds a database read every second: issue 19.8).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from fastapi import APIRouter
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from senddock.delivery.rescuer import WorkerView, list_workers
from senddock.errors import NotFound
from senddock.views import plain
from senddock.web import auth, imports, queries
from senddock.web.dashboard.campaign_pages import live_state
from senddock.web.dashboard.gate import LoggedIn
from senddock.web.dashboard.views import Page, db, render

log = logging.getLogger("senddock.web.dashboard")
router = APIRouter(include_in_schema=False, route_class=LoggedIn)

CAMPAIGN_KEYS = (
    "id",
    "status",
    "state",
    "total",
    "sent",
    "failed",
    "cancelled",
    "done",
    "percent",
    "unconfirmed",
)
# Keep-alive comments, so proxies do not close a quiet stream.
PING_SECONDS = 15
# On shutdown, streams get this long to end cleanly before they are cut.
SHUTDOWN_GRACE = 2.0
IMPORT_DONE = ("done", "failed")


def _event(name: str, data: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps(data, default=str), event=name)


class Streams:
    """How many streams each session (admin and client address) holds now; one event loop
    touches it, so no lock."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: dict[str, int] = {}

    def take(self, key: str) -> bool:
        if self.open.get(key, 0) >= self.limit:
            return False
        self.open[key] = self.open.get(key, 0) + 1
        return True

    def give_back(self, key: str) -> None:
        left = self.open.get(key, 1) - 1
        if left > 0:
            self.open[key] = left
        else:
            self.open.pop(key, None)


class CountedStream(EventSourceResponse):
    """An event stream that gives its slot back however it ends."""

    def __init__(self, *args: Any, release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


async def _every(
    seconds: float,
    read: Callable[[int], dict[str, Any] | None],
    name: str,
    stop: anyio.Event,
    lifetime: float,
) -> AsyncIterator[ServerSentEvent]:
    """Call read(tick) in a thread every `seconds` and send what it returns, until it returns
    None, `lifetime` seconds have passed, or the server shuts down (`stop`; the stream then
    ends cleanly). A failed read (the database restarting) is logged and skipped."""
    tick = 0
    end = time.monotonic() + lifetime
    while not stop.is_set() and time.monotonic() < end:
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
    request: Request, seconds: float, read: Callable[[int], dict[str, Any] | None], name: str
) -> Response:
    """An event stream of read() every `seconds`, named `name`; 429 past the session's cap."""
    state = request.app.state
    settings = state.settings
    if not hasattr(state, "live_streams"):
        state.live_streams = Streams(settings.streams_per_session)
    streams: Streams = state.live_streams
    key = f"{auth.session_admin(request)}|{request.client.host if request.client else ''}"
    if not streams.take(key):
        return render(
            request,
            "error.html",
            429,
            title="Too many live views",
            message="This session already follows as many live pages as it may. "
            "Close some tabs, then reload.",
        )
    stop = anyio.Event()
    return CountedStream(
        _every(seconds, read, name, stop, settings.stream_seconds),
        ping=PING_SECONDS,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        shutdown_event=stop,
        shutdown_grace_period=SHUTDOWN_GRACE,
        release=lambda: streams.give_back(key),
    )


@router.get("/events/campaigns")
async def campaign_list_events(request: Request, page: str = "1") -> Response:
    """The counts and progress of the campaigns on a page of the list."""
    at = Page.of(page)

    def read(_: int) -> dict[str, Any]:
        with db(request) as conn:
            rows, _ = queries.campaigns_page(conn, None, at.size, at.offset)
        return {"campaigns": [{k: r[k] for k in CAMPAIGN_KEYS} for r in rows]}

    return stream(request, 1.0, read, "campaigns")


@router.get("/events/campaigns/{campaign_id}")
async def campaign_events(request: Request, campaign_id: int) -> Response:
    """One campaign's status, counts, progress and send rate; the chart every 2 seconds."""

    lease = float(request.app.state.settings.lease_seconds)

    def read(tick: int) -> dict[str, Any] | None:
        with db(request) as conn:
            try:
                state = live_state(conn, campaign_id, lease, chart=tick % 2 == 0)
            except NotFound:
                return None
        return state

    return stream(request, 1.0, read, "campaign")


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
        finished = job.status in IMPORT_DONE
        return dict(plain(job))

    return stream(request, 0.5, read, "import")


@router.get("/events/workers")
async def worker_events(request: Request) -> Response:
    """The registered workers with heartbeat ages, every 2 seconds."""
    lease = float(request.app.state.settings.lease_seconds)

    def read(_: int) -> dict[str, Any]:
        with db(request) as conn:
            rows = list_workers(conn, lease)
        return {"workers": [worker_row(r) for r in rows]}

    return stream(request, 2.0, read, "workers")


def worker_row(worker: WorkerView) -> dict[str, Any]:
    """A worker as the page shows it: its health as list_workers judged it (database clock)."""
    return {**plain(worker), "heartbeat_age": round(worker.heartbeat_age, 1)}
