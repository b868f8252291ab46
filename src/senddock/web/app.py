"""The app `senddock serve` runs: the pages every message links to, the API, the dashboard.

GET  /unsubscribe/TOKEN  a page naming the address, with a button that POSTs back.
POST /unsubscribe/TOKEN  unsubscribes at once: what mail providers send on one click
                         (RFC 8058, body `List-Unsubscribe=One-Click`; any body is accepted);
                         SENDDOCK_ONE_CLICK=lists: leaves the campaign's lists, suppresses nobody.
GET|POST /preferences/TOKEN  the preference page (web/preferences.py).
GET|HEAD /r/TOKEN, /o/TOKEN  a tracked message's click and open (web/tracking.py, issue 37).
GET|HEAD /t/TOKEN  its hidden trap link, followed by machines only (web/tracking.py).
GET  /confirm/TOKEN      double opt-in: a page with a button that POSTs back.
POST /confirm/TOKEN      confirms the membership.
POST /subscribe          public sign-up to a list marked public (web/subscribe.py).
A GET never changes anything (mail scanners follow links). A token whose signature does not
check is refused with 400 and changes nothing.

/healthz and /readyz need no credentials; /api/v1, /metrics and the API's description
(/openapi.json, /docs: web/docs.py) need an API token (or a dashboard session); the
dashboard pages need a login. /webhooks/ (web/webhooks.py) takes providers' bounce and complaint
events, each proving itself by its signature, never by a session.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
from fastapi import FastAPI
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool
from starlette.concurrency import run_in_threadpool
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from senddock.audience import addresses, optin, preferences, signup, suppressions
from senddock.campaigns.compose import link_key
from senddock.config import Settings
from senddock.db import connect, sql
from senddock.messages import UNSUBSCRIBE, Links, verify
from senddock.runtime import build_worker, serve_maintainer
from senddock.tracking import EventWriter
from senddock.web import (
    api,
    dashboard,
    docs,
    errors,
    exports_api,
    guard,
    headers,
    layouts_api,
    login_limits,
    metrics,
    segments_api,
    sessions,
    subscribe,
    tracking,
    webhooks,
)
from senddock.web.pages import page
from senddock.web.preferences import PreferencePages

log = logging.getLogger("senddock.web")

Pool = ConnectionPool[psycopg.Connection[DictRow]]
STATIC = Path(__file__).resolve().parent / "static"
SESSION_COOKIE = "senddock_session"
QUERIES = sql.load(__package__, "app.sql")

INVALID = (
    "<p>This link is not valid: it may have been cut or changed. "
    "Use the link from the message itself.</p>"
)


def _and(items: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return " and ".join([", ".join(items[:-1]), items[-1]] if len(items) > 1 else items)


class Pages:
    """The unsubscribe and confirm handlers, sharing the app's pool and the link key."""

    def __init__(self, pool: Pool, settings: Settings) -> None:
        self.pool = pool
        self.settings = settings
        self.key = b""

    def open(self) -> None:
        with self.pool.connection() as conn:
            self.key = link_key(conn, self.settings)

    def _ids(self, request: Request, purpose: str = UNSUBSCRIBE) -> tuple[int, int] | None:
        ids = verify(self.key, purpose, str(request.path_params["token"]))
        if ids is None or len(ids) != 2:
            return None
        return ids[0], ids[1]

    def _who(self, subscriber: int, campaign: int) -> suppressions.LinkSubject | None:
        with self.pool.connection() as conn:
            return suppressions.who(conn, subscriber, campaign)

    def _unsubscribe(self, subscriber: int, campaign: int, detail: str) -> bool:
        with self.pool.connection() as conn:
            if self.settings.one_click == "lists":  # leave the campaign's lists, nothing more
                return preferences.leave_campaign_lists(conn, subscriber, campaign, detail)
            return suppressions.unsubscribe(conn, subscriber, campaign, detail)

    def _choose(self, subscriber: int, campaign: int) -> str:
        """A link to the preference page, offered beside the unsubscribe button."""
        links = Links(self.settings.public_url, self.key, campaign, mailto="")  # as messages do
        url = html.escape(links.preferences(subscriber))
        return f'<p>Or <a href="{url}">choose which lists you receive</a>.</p>'

    def _done(self) -> str:
        if self.settings.one_click == "lists":
            return "<p>You left the lists this message came from.</p>"
        return "<p>You are unsubscribed and will get no more messages.</p>"

    async def show(self, request: Request) -> Response:
        ids = self._ids(request)
        if ids is None:
            return page("Link not valid", INVALID, 400)
        found = await run_in_threadpool(self._who, *ids)
        if found is None:
            return page("Unsubscribed", "<p>This address is no longer on our lists.</p>")
        address = html.escape(found.email)
        if found.suppressed:
            return page("Unsubscribed", f"<p><b>{address}</b> gets no more messages from us.</p>")
        names = [f"<b>{html.escape(name)}</b>" for name in found.list_names]
        listed = f" from {_and(names)}" if names else ""
        final = (
            "" if self.settings.one_click == "lists" else " You will get no more messages from us."
        )
        return page(
            "Unsubscribe",
            f"<p>Unsubscribe <b>{address}</b>{listed}?{final}</p>"
            '<form method="post"><button type="submit">Unsubscribe</button></form>'
            + self._choose(*ids),
        )

    async def unsubscribe(self, request: Request) -> Response:
        ids = self._ids(request)
        if ids is None:
            return page("Link not valid", INVALID, 400)
        body = (await request.body())[:200]
        detail = "one-click" if b"List-Unsubscribe=One-Click" in body else "unsubscribe page"
        await run_in_threadpool(self._unsubscribe, ids[0], ids[1], detail)
        return page("Unsubscribed", self._done() + self._choose(*ids))

    def _about(self, subscriber: int, list_id: int) -> optin.Pending | None:
        with self.pool.connection() as conn:
            return optin.about(conn, subscriber, list_id)

    def _confirm(self, subscriber: int, list_id: int) -> bool:
        with self.pool.connection() as conn:
            return signup.confirm(conn, subscriber, list_id)  # stamps its consent row too

    async def show_confirm(self, request: Request) -> Response:
        ids = self._ids(request, optin.CONFIRM)
        if ids is None:
            return page("Link not valid", INVALID, 400)
        found = await run_in_threadpool(self._about, *ids)
        if found is None or found.status == "unsubscribed":
            return page("Not subscribed", "<p>This subscription no longer exists.</p>")
        address = html.escape(found.email)
        listed = html.escape(found.list_name)
        if found.status == "confirmed":
            return page("Confirmed", f"<p><b>{address}</b> is subscribed to <b>{listed}</b>.</p>")
        return page(
            "Confirm your subscription",
            f"<p>Subscribe <b>{address}</b> to <b>{listed}</b>?</p>"
            '<form method="post"><button type="submit">Confirm</button></form>',
        )

    async def confirm(self, request: Request) -> Response:
        ids = self._ids(request, optin.CONFIRM)
        if ids is None:
            return page("Link not valid", INVALID, 400)
        await run_in_threadpool(self._confirm, *ids)
        found = await run_in_threadpool(self._about, *ids)
        if found is None or found.status != "confirmed":
            return page("Not subscribed", "<p>This subscription no longer exists.</p>")
        return page("Confirmed", "<p>Thank you: your subscription is confirmed.</p>")


async def health(_: Request) -> Response:
    """The process is up (no database check: that is /readyz)."""
    return PlainTextResponse("ok\n")


def _duties_ended(task: asyncio.Task[None]) -> None:
    """The serve maintainer runs until shutdown: say so if one of its duties failed."""
    if not task.cancelled() and task.exception() is not None:
        log.error("background duties stopped", exc_info=task.exception())


def session_secret(settings: Settings, database_url: str) -> str:
    """SENDDOCK_SESSION_SECRET, or the key stored in the database (made once, so sessions
    survive restarts and every `serve` process of one database accepts the same cookies)."""
    if settings.session_secret:
        return settings.session_secret
    with connect(database_url) as conn:
        conn.execute(QUERIES["make_session_key"], (secrets.token_hex(32),))
        row = conn.execute(QUERIES["session_key"]).fetchone()
    assert row is not None
    return str(row["value"])


def cookie_secure(settings: Settings) -> bool:
    """Secure cookies when the public URL is https, or SENDDOCK_COOKIE_SECURE=1."""
    forced = settings.cookie_secure.strip().lower()
    return settings.public_url.lower().startswith("https://") or forced in ("1", "true", "yes")


class SendDock(FastAPI):
    """FastAPI whose every answer, a 500 of its outermost middleware too, carries the
    security headers (web/headers.py)."""

    def build_middleware_stack(self) -> ASGIApp:
        return headers.SecureHeaders(super().build_middleware_stack())


def create_app(
    database_url: str,
    schedule_every: float = 0.0,
    *,
    settings: Settings | None = None,
    workers: int = 0,
) -> FastAPI:
    """The app `senddock serve` runs; its pool opens at startup and closes at shutdown.

    With `schedule_every` > 0 it also runs the campaign scheduler on that period; with
    `workers` > 0 a delivery Worker with that many senders runs on the same event loop, and
    shutdown (SIGTERM) lets it finish the messages in flight.
    """
    settings = settings or Settings(database_url=database_url)
    addresses.configure(settings.allow_reserved_domains)
    pool: Pool = ConnectionPool(
        database_url,
        connection_class=psycopg.Connection[DictRow],
        min_size=1,
        max_size=12,
        open=False,
        kwargs={"autocommit": True, "row_factory": dict_row},
    )
    pages = Pages(pool, settings)
    checker = login_limits.Checker()
    events = EventWriter(database_url, prefetch=settings.track_prefetch)
    tracked = tracking.TrackingRoutes(pool, lambda: pages.key, events)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(pool.open, True, 30)
        await run_in_threadpool(pages.open)
        app.state.link_key = pages.key
        # The same maintainer as a worker's (senddock/runtime.py): the scheduler, the imports.
        duties = asyncio.create_task(serve_maintainer(database_url, schedule_every).run())
        duties.add_done_callback(_duties_ended)
        writing = asyncio.create_task(events.run())  # opens and clicks, in batches
        writing.add_done_callback(_duties_ended)
        tasks: list[asyncio.Task[Any]] = [duties, writing]
        worker = None
        worker_task = None
        if workers > 0:
            worker = build_worker(settings, database_url, workers, imports=False)
            worker_task = asyncio.create_task(worker.run())
        try:
            yield
        finally:
            if worker is not None and worker_task is not None:
                log.info("stopping the worker: finishing messages in flight")
                worker.stop()
                with contextlib.suppress(Exception):
                    await worker_task
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await events.close()  # what the buffer still holds, a few seconds at most
            checker.close()
            await run_in_threadpool(pool.close)

    app = SendDock(
        title="SendDock",
        version="1",
        summary="Self-hosted email broadcasts: subscribers, lists, campaigns and their queue.",
        lifespan=lifespan,
        openapi_url=None,  # docs.install serves the first two behind the API's auth
        docs_url=None,
        redoc_url=None,
    )
    app.state.pool = pool
    app.state.database_url = database_url
    app.state.settings = settings
    app.state.link_key = b""
    app.state.password_checker = checker
    # Innermost: the guard authenticates from the admin id SessionCheck has resolved.
    app.add_middleware(guard.BodyGuard, import_cap=settings.max_import_mb * 1024 * 1024)
    # Outside the guard, inside SessionMiddleware: the cookie is decoded by then.
    app.add_middleware(
        sessions.SessionCheck,
        pool=pool,
        idle=settings.session_idle_timeout,
        lifetime=settings.session_lifetime,
    )
    app.add_middleware(
        SessionMiddleware,
        secret_key=session_secret(settings, database_url),
        session_cookie=SESSION_COOKIE,
        max_age=int(settings.session_lifetime),
        same_site="lax",
        https_only=cookie_secure(settings),
    )
    errors.install(app)
    app.add_api_route("/unsubscribe/{token}", pages.show, methods=["GET"], include_in_schema=False)
    app.add_api_route(
        "/unsubscribe/{token}", pages.unsubscribe, methods=["POST"], include_in_schema=False
    )
    app.add_api_route(
        "/confirm/{token}", pages.show_confirm, methods=["GET"], include_in_schema=False
    )
    app.add_api_route("/confirm/{token}", pages.confirm, methods=["POST"], include_in_schema=False)
    prefs = PreferencePages(pool, lambda: pages.key, page)
    app.add_api_route("/preferences/{token}", prefs.show, methods=["GET"], include_in_schema=False)
    app.add_api_route(
        "/preferences/{token}", prefs.submit, methods=["POST"], include_in_schema=False
    )
    for path, handler in (
        ("/r/{token}", tracked.click),
        ("/o/{token}", tracked.open),
        ("/t/{token}", tracked.trap),
    ):
        app.add_api_route(path, handler, methods=["GET", "HEAD"], include_in_schema=False)
    app.state.tracking = tracked
    app.add_api_route("/healthz", health, methods=["GET"], include_in_schema=False)
    app.include_router(metrics.router)
    app.include_router(api.router)
    app.include_router(segments_api.router)
    app.include_router(exports_api.router)
    app.include_router(layouts_api.router)
    app.include_router(dashboard.router)
    app.include_router(webhooks.router(pool, settings))
    app.include_router(subscribe.router)  # POST /subscribe, the public sign-up form
    docs.install(app)
    if STATIC.is_dir():
        app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
