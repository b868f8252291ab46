"""The pages every message links to, as a Starlette app.

GET  /unsubscribe/TOKEN  a page naming the address, with a button that POSTs back.
POST /unsubscribe/TOKEN  unsubscribes at once: what mail providers send on one click
                         (RFC 8058, body `List-Unsubscribe=One-Click`; any body is accepted).
GET  /confirm/TOKEN      double opt-in: a page with a button that POSTs back.
POST /confirm/TOKEN      confirms the membership.
A GET never changes anything (mail scanners follow links). A token whose signature does not
check is refused with 400 and changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from senddock.audience import optin, suppressions
from senddock.campaigns import scheduler
from senddock.campaigns.compose import link_key
from senddock.messages import UNSUBSCRIBE, LinkSettings, verify

log = logging.getLogger("senddock.web")

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex"><title>{title}</title>
<style>body{{font:16px/1.5 system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem}}
button{{font:inherit;padding:.5rem 1.25rem;cursor:pointer}}</style></head>
<body><h1>{title}</h1>{body}</body></html>
"""


def page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(PAGE.format(title=html.escape(title), body=body), status_code=status)


INVALID = (
    "<p>This link is not valid: it may have been cut or changed. "
    "Use the link from the message itself.</p>"
)


class Pages:
    """The handlers, sharing one connection pool and the link key."""

    def __init__(self, database_url: str, settings: LinkSettings) -> None:
        self.pool = ConnectionPool(
            database_url,
            min_size=1,
            max_size=4,
            open=False,
            kwargs={"autocommit": True, "row_factory": dict_row},
        )
        self.settings = settings
        self.key = b""

    def open(self) -> None:
        self.pool.open(wait=True, timeout=30)
        with self.pool.connection() as conn:
            self.key = link_key(conn, self.settings)  # type: ignore[arg-type]

    def close(self) -> None:
        self.pool.close()

    def _ids(self, request: Request, purpose: str = UNSUBSCRIBE) -> tuple[int, int] | None:
        ids = verify(self.key, purpose, str(request.path_params["token"]))
        if ids is None or len(ids) != 2:
            return None
        return ids[0], ids[1]

    def _who(self, subscriber: int, campaign: int) -> dict[str, Any] | None:
        with self.pool.connection() as conn:
            return suppressions.who(conn, subscriber, campaign)  # type: ignore[arg-type]

    def _unsubscribe(self, subscriber: int, campaign: int, detail: str) -> bool:
        with self.pool.connection() as conn:
            return suppressions.unsubscribe(conn, subscriber, campaign, detail)  # type: ignore[arg-type]

    async def show(self, request: Request) -> Response:
        ids = self._ids(request)
        if ids is None:
            return page("Link not valid", INVALID, 400)
        found = await run_in_threadpool(self._who, *ids)
        if found is None:
            return page("Unsubscribed", "<p>This address is no longer on our lists.</p>")
        address = html.escape(str(found["email"]))
        if found["suppressed"]:
            return page("Unsubscribed", f"<p><b>{address}</b> gets no more messages from us.</p>")
        listed = f" from <b>{html.escape(found['list_name'])}</b>" if found["list_name"] else ""
        return page(
            "Unsubscribe",
            f"<p>Unsubscribe <b>{address}</b>{listed}? You will get no more messages from us.</p>"
            '<form method="post"><button type="submit">Unsubscribe</button></form>',
        )

    async def unsubscribe(self, request: Request) -> Response:
        ids = self._ids(request)
        if ids is None:
            return page("Link not valid", INVALID, 400)
        body = (await request.body())[:200]
        detail = "one-click" if b"List-Unsubscribe=One-Click" in body else "unsubscribe page"
        await run_in_threadpool(self._unsubscribe, ids[0], ids[1], detail)
        return page("Unsubscribed", "<p>You are unsubscribed and will get no more messages.</p>")

    def _about(self, subscriber: int, list_id: int) -> dict[str, Any] | None:
        with self.pool.connection() as conn:
            return optin.about(conn, subscriber, list_id)  # type: ignore[arg-type]

    def _confirm(self, subscriber: int, list_id: int) -> bool:
        with self.pool.connection() as conn:
            return optin.confirm(conn, subscriber, list_id)  # type: ignore[arg-type]

    async def show_confirm(self, request: Request) -> Response:
        ids = self._ids(request, optin.CONFIRM)
        if ids is None:
            return page("Link not valid", INVALID, 400)
        found = await run_in_threadpool(self._about, *ids)
        if found is None or found["status"] == "unsubscribed":
            return page("Not subscribed", "<p>This subscription no longer exists.</p>")
        address = html.escape(str(found["email"]))
        listed = html.escape(str(found["list_name"]))
        if found["status"] == "confirmed":
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
        if found is None or found["status"] != "confirmed":
            return page("Not subscribed", "<p>This subscription no longer exists.</p>")
        return page("Confirmed", "<p>Thank you: your subscription is confirmed.</p>")


async def health(_: Request) -> Response:
    return PlainTextResponse("ok\n")


async def scheduler_loop(database_url: str, every: float) -> None:
    """Enqueue due campaigns every `every` seconds (safe beside other schedulers)."""
    while True:
        try:
            done = await run_in_threadpool(scheduler.tick, database_url)
            if done:
                log.info("scheduler enqueued campaigns %s", done)
        except Exception:  # a database outage must not end the loop
            log.warning("scheduler pass failed", exc_info=True)
        await asyncio.sleep(every)


def create_app(
    database_url: str, settings: LinkSettings | None = None, schedule_every: float = 0.0
) -> Starlette:
    """The app `senddock serve` runs; its pool opens at startup and closes at shutdown.

    With `schedule_every` > 0 it also runs the campaign scheduler on that period.
    """
    pages = Pages(database_url, settings or LinkSettings())

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await run_in_threadpool(pages.open)
        task = None
        if schedule_every > 0:
            task = asyncio.create_task(scheduler_loop(database_url, schedule_every))
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await run_in_threadpool(pages.close)

    routes = [
        Route("/unsubscribe/{token}", pages.show, methods=["GET"]),
        Route("/unsubscribe/{token}", pages.unsubscribe, methods=["POST"]),
        Route("/confirm/{token}", pages.show_confirm, methods=["GET"]),
        Route("/confirm/{token}", pages.confirm, methods=["POST"]),
        Route("/healthz", health, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
