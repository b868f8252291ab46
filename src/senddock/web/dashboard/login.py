"""Signing in and out of the dashboard (rate-limited, CSRF-checked)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from senddock.web import auth, login_limits, sessions
from senddock.web.dashboard.gate import LoggedIn, csrf_passes, forbidden
from senddock.web.dashboard.views import db, redirect, render

public = APIRouter(include_in_schema=False)
private = APIRouter(include_in_schema=False, route_class=LoggedIn)

TOO_MANY = "Too many failed sign-ins for this address. Wait a few minutes, then try again."
BUSY = "Too many sign-ins at this moment. Try again in a few seconds."
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


def _reserve(request: Request, email: str) -> login_limits.Attempt:
    with db(request) as conn:
        return login_limits.reserve(conn, email, request.client.host if request.client else None)


def _give_back(request: Request, attempt: login_limits.Attempt) -> None:
    with db(request) as conn:
        login_limits.give_back(conn, attempt)


def _login_hash(request: Request, email: str) -> tuple[int | None, str]:
    with db(request) as conn:
        return auth.login_hash(conn, email)


def _start_session(request: Request, attempt: login_limits.Attempt, admin_id: int) -> str:
    settings = request.app.state.settings
    with db(request) as conn:
        login_limits.succeeded(conn, attempt)
        return sessions.start(
            conn, admin_id, settings.session_idle_timeout, settings.session_lifetime
        )


@public.post("/login")
async def login(
    request: Request,
    email: Annotated[str, Form()] = "",
    password: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = "/",
) -> Response:
    """Count the attempt (shared by every process), then check the password on the
    checker's own threads: see web/login_limits.py."""
    if not await csrf_passes(request):
        return forbidden(request)
    email = email.strip()
    again = {"title": "Sign in", "next": safe_next(next), "email": email}
    checker: login_limits.Checker = request.app.state.password_checker
    if checker.full():  # refused at once, at no cost, and counted nowhere
        return render(request, "login.html", 429, error=BUSY, **again)
    attempt = await run_in_threadpool(_reserve, request, email)
    if not attempt.allowed:
        return render(request, "login.html", 429, error=TOO_MANY, **again)
    with checker.slot() as admitted:
        if not admitted:
            await run_in_threadpool(_give_back, request, attempt)
            return render(request, "login.html", 429, error=BUSY, **again)
        admin, hashed = await run_in_threadpool(_login_hash, request, email)
        matches = await checker.run(auth.verify_password, hashed, password)
    if admin is None or not matches:
        return render(request, "login.html", 401, error=WRONG, **again)
    session_id = await run_in_threadpool(_start_session, request, attempt, admin)
    auth.new_session_cookie(request, session_id)
    auth.set_session_admin(request, admin)
    return redirect(safe_next(next))


def _end_session(request: Request, session_id: str) -> None:
    with db(request) as conn:
        sessions.end(conn, session_id)


@private.post("/logout")
async def logout(request: Request) -> Response:
    session_id = request.session.get(auth.SESSION_ID)
    if isinstance(session_id, str):
        await run_in_threadpool(_end_session, request, session_id)
    auth.new_session_cookie(request, None)
    auth.set_session_admin(request, None)
    return redirect("/login")
