"""The dashboard's door: every page needs a login, every form POST a valid CSRF token.

`LoggedIn` is an APIRoute class, so a route cannot forget either check: a router built with
`route_class=LoggedIn` runs them before the handler, and the handler never sees a request
that failed them. For a page (GET) it also reads, once and off the event loop, what the
navigation shows on every page: how many recipients are unconfirmed (views.render puts it
beside the link to /unconfirmed).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import quote

from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from senddock.campaigns import unconfirmed
from senddock.web import auth
from senddock.web.dashboard.views import db, redirect, render

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
Handler = Callable[[Request], Coroutine[Any, Any, Response]]


async def csrf_passes(request: Request) -> bool:
    """The form field `csrf` (or header X-CSRF-Token) matches this session's token."""
    submitted = request.headers.get("x-csrf-token")
    if submitted is None:
        form = await request.form()  # parsed once; the handler gets the same form
        value = form.get("csrf")
        submitted = value if isinstance(value, str) else None
    return auth.csrf_ok(request, submitted)


def forbidden(request: Request) -> Response:
    return render(
        request,
        "error.html",
        403,
        title="Form expired",
        message="This form has expired or did not come from this dashboard. "
        "Go back, reload the page and try again.",
    )


def login_url(request: Request) -> str:
    """/login with a `next` that brings the browser back where it was going."""
    target = request.url.path
    if request.method == "GET" and request.url.query:
        target += "?" + request.url.query
    return "/login?next=" + quote(target, safe="/")


def unconfirmed_total(request: Request) -> int:
    """The navigation's badge: unconfirmed recipients of every campaign."""
    with db(request) as conn:
        return unconfirmed.total(conn)


class LoggedIn(APIRoute):
    """A dashboard route: redirect to /login without a session; 403 on a bad CSRF token."""

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            if auth.session_admin(request) is None:
                return redirect(login_url(request))
            if request.method not in SAFE_METHODS and not await csrf_passes(request):
                return forbidden(request)
            if request.method == "GET":
                total = await run_in_threadpool(unconfirmed_total, request)
                request.state.nav_unconfirmed = total
            return await handler(request)

        return guarded
