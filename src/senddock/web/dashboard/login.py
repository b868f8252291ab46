"""Signing in and out of the dashboard (rate-limited, CSRF-checked)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from senddock.web import auth
from senddock.web.dashboard.gate import LoggedIn, csrf_passes, forbidden
from senddock.web.dashboard.views import db, redirect, render

public = APIRouter(include_in_schema=False)
private = APIRouter(include_in_schema=False, route_class=LoggedIn)

TOO_MANY = "Too many failed sign-ins for this address. Wait a few minutes, then try again."
WRONG = "Wrong email or password."


def safe_next(target: str) -> str:
    """Where to go after signing in: a path on this site only (no open redirect)."""
    if target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


@public.get("/login")
def login_form(request: Request, next: str = "/") -> Response:
    if auth.session_admin(request) is not None:
        return redirect(safe_next(next))
    return render(request, "login.html", title="Sign in", next=safe_next(next), email="", error="")


def _authenticate(request: Request, email: str, password: str) -> int | None:
    with db(request) as conn:
        return auth.authenticate_admin(conn, email, password)


@public.post("/login")
async def login(
    request: Request,
    email: Annotated[str, Form()] = "",
    password: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = "/",
) -> Response:
    if not await csrf_passes(request):
        return forbidden(request)
    email = email.strip()
    limiter = request.app.state.login_limiter
    key = f"{email.lower()}|{request.client.host if request.client else ''}"
    again = {"title": "Sign in", "next": safe_next(next), "email": email}
    if not limiter.allowed(key):
        return render(request, "login.html", 429, error=TOO_MANY, **again)
    admin = await run_in_threadpool(_authenticate, request, email, password)
    if admin is None:
        limiter.failed(key)
        return render(request, "login.html", 401, error=WRONG, **again)
    limiter.succeeded(key)
    auth.login_session(request, admin)
    return redirect(safe_next(next))


@private.post("/logout")
def logout(request: Request) -> Response:
    auth.logout_session(request)
    return redirect("/login")
