"""One JSON error shape for the API: `{"error": {"field": name | null, "message": "..."}}`.

Every expected failure is a senddock.errors.SendDockError raised where it happens, with its
status and field: one handler answers it, as the error shape under /api/ and as the
dashboard's error page elsewhere, so endpoints just call the services. The other handlers
adapt the framework's own failures (validation, routing, a value Postgres cannot hold) to the
same shape. Nothing a client sends may end in a 500.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Mount

from senddock.errors import Invalid, SendDockError
from senddock.web import auth
from senddock.web.dashboard.views import error_page

log = logging.getLogger("senddock.web")


class ErrorDetail(BaseModel):
    field: str | None
    message: str


class ErrorBody(BaseModel):
    """Every 4xx answer of the API."""

    error: ErrorDetail


def body(status: int, message: str, field: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"field": field, "message": message}}, status_code=status)


# Documented on every API operation, so the OpenAPI document names every status we answer.
RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "No valid API token or session"},
    403: {"model": ErrorBody, "description": "Session request without its CSRF token"},
    404: {"model": ErrorBody, "description": "No such id"},
    409: {"model": ErrorBody, "description": "Not possible in the current state"},
    413: {"model": ErrorBody, "description": "Body over its cap (web/guard.py)"},
    422: {"model": ErrorBody, "description": "Bad input; `field` names it"},
}


METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed(request: Request) -> str:
    """The Allow header of a 405: every method some route answers at this path (Starlette
    names only those of the first route that matched; one path may have several routes).
    Mounts (static files) match any method, so they are left to their own answer."""
    routes = [r for r in request.app.router.routes if not isinstance(r, Mount)]
    found = [
        method
        for method in METHODS
        if any(r.matches({**request.scope, "method": method})[0] is Match.FULL for r in routes)
    ]
    return ", ".join(found)


def refusal(request: Request, message: str, field: str | None = None) -> Response:
    """Bad input the framework or Postgres refused: the error shape under /api/, elsewhere
    (the dashboard: `/subscribers?q=%00`) the error page with the message, never JSON."""
    if request.url.path.startswith("/api/"):
        return body(422, message, field)
    return error_page(request, Invalid(message, field=field))


def install(app: FastAPI) -> None:
    """Register the handlers that turn every expected failure into the error shape."""

    async def refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SendDockError)
        if request.url.path.startswith("/api/"):
            return body(exc.status, exc.message, exc.field)
        return error_page(request, exc)  # the dashboard, the unsubscribe pages

    async def not_authenticated(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, auth.NotAuthenticated)
        return auth.unauthorized(exc.message)

    async def csrf_failed(_: Request, __: Exception) -> Response:
        return auth.csrf_refused()

    async def validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {}
        loc = [str(p) for p in first.get("loc", ()) if not isinstance(p, int)]
        field = loc[-1] if len(loc) > 1 else (loc[0] if loc else None)
        where = ".".join(loc[1:]) or (loc[0] if loc else "request")
        message = f"{where}: {first.get('msg', 'invalid')}"
        return refusal(request, message, field)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 405:
            given = (exc.headers or {}).get("Allow", "GET, HEAD")  # a mount: static files
            exc.headers = {**(exc.headers or {}), "Allow": allowed(request) or given}
        if not request.url.path.startswith("/api/"):
            return await http_exception_handler(request, exc)
        if exc.status_code == 400:  # a body that cannot even be parsed: bad input like any
            return body(422, str(exc.detail), "body")
        answer = body(exc.status_code, str(exc.detail))
        answer.headers.update(exc.headers or {})
        return answer

    async def data_error(request: Request, exc: Exception) -> Response:
        # Input Postgres cannot hold (a NUL byte, a number out of range): the client's fault.
        log.info("refused input on %s: %s", request.url.path, exc)
        return refusal(request, f"invalid input: {str(exc).splitlines()[0]}")

    app.add_exception_handler(SendDockError, refused)
    app.add_exception_handler(auth.NotAuthenticated, not_authenticated)
    app.add_exception_handler(auth.CsrfFailed, csrf_failed)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(psycopg.DataError, data_error)
