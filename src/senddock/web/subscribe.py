"""POST /subscribe: the public sign-up form's target (an HTML form post, or JSON).

No login and no CSRF token (the form lives on someone else's site); instead:

- the form names its list by a signed token (audience/signup.py), and only a public list
  takes sign-ups;
- every request is counted first, per client IP (IPv6 by its /64), in the table the sign-in
  limit keeps (web/login_limits.py), so every `serve` process of a database shares the count:
  over IP_LIMIT in a window of login_limits.WINDOW the answer is 429;
- a honeypot field people never see: a request that fills it gets the usual answer and
  nothing is stored;
- the answer never depends on the address: new, already subscribed, unsubscribed or
  suppressed, the status and the body are the same, and everything that differs by address
  (the sign-up's writes, the confirmation mail) runs after the answer has gone, so the time
  does not tell either (bench/signup_timing.py: a suppressed address, which writes nothing,
  answered 26 % faster while its statements ran before the answer; now within noise). At
  most ADDRESS_MAILS requests go to one address a window, so the form cannot be used to
  flood someone's inbox; a request over that is dropped silently. The price: a process
  that dies right after the answer loses that one sign-up (nobody is subscribed without
  having asked; signing up again works);
- the body is capped like every public body (web/guard.py, PUBLIC_BODY).
"""

from __future__ import annotations

import html
import json
import logging
from typing import Any

from fastapi import APIRouter, BackgroundTasks
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from senddock.audience import optin, signup
from senddock.audience.addresses import normalize
from senddock.delivery import oneoff
from senddock.errors import Invalid, SendDockError
from senddock.web import errors, login_limits
from senddock.web.dashboard.views import db
from senddock.web.pages import page

log = logging.getLogger("senddock.web")

router = APIRouter(include_in_schema=False)

IP_LIMIT = 10  # sign-ups from one client a window
ADDRESS_MAILS = 3  # confirmation requests mailed to one address a window
CLOSED = "This sign-up form is closed, or its link is not valid."
TOO_MANY = "Too many sign-ups from your address. Wait a few minutes, then try again."


def _wants_json(request: Request) -> bool:
    return request.headers.get("content-type", "").split(";")[0].strip() == "application/json"


async def _fields(request: Request, as_json: bool) -> dict[str, str]:
    """The posted fields that are text (anything else is ignored)."""
    if as_json:
        try:
            data = json.loads(await request.body())
        except ValueError as exc:
            raise Invalid("the body is not valid JSON", field="body") from exc
        if not isinstance(data, dict):
            raise Invalid("the body must be a JSON object", field="body")
        items: Any = data.items()
    else:
        items = (await request.form()).multi_items()
    return {str(k): v for k, v in items if isinstance(v, str)}


def _answer(request: Request, lst: signup.PublicList, as_json: bool) -> Response:
    """The one answer every accepted sign-up gets: it names the list, never the address."""
    text = f"Thank you: your sign-up to {lst.name} is received."
    if lst.double_opt_in:
        text += " If the address can receive our mail, a message with a link is on its way."
        text += " Follow it to confirm."
    if as_json:
        return JSONResponse({"status": "received", "message": text})
    return _page(request, "Thank you", text, 200)


def _page(request: Request, title: str, text: str, status: int) -> HTMLResponse:
    return page(title, f"<p>{html.escape(text)}</p>", status)


def _refusal(
    request: Request, status: int, text: str, field: str | None, as_json: bool
) -> Response:
    if as_json:
        response: Response = errors.body(status, text, field)
    else:
        response = _page(request, "Not signed up", text, status)
    if status == 429:
        response.headers["Retry-After"] = str(int(login_limits.WINDOW))
    return response


def _count(request: Request, key: str) -> int:
    with db(request) as conn:
        n = login_limits.count(conn, key)
        login_limits.sweep(conn)
        return n


def _list(request: Request, token: str) -> signup.PublicList | None:
    with db(request) as conn:
        return signup.public_list(conn, request.app.state.link_key, token)


def _sign_up_and_mail(
    request: Request, lst: signup.PublicList, address: str, name: str, ip: str, agent: str
) -> None:
    """The sign-up itself, once the answer went: its membership and consent row, then its
    confirmation request, at most ADDRESS_MAILS to one address a window."""
    try:
        with db(request) as conn:
            rows = signup.sign_up(conn, lst, address, name, ip, agent)
    except Exception:
        log.exception("sign-up to %r could not be stored", lst.name)
        return
    if not rows:
        return
    if _count(request, f"signup-to:{address.lower()}") > ADDRESS_MAILS:
        log.info("sign-up: no more confirmation requests to one address this window")
        return
    s = request.app.state.settings
    try:
        for list_name, reply in oneoff.send(s, optin.requests(rows, request.app.state.link_key, s)):
            ok = reply.accepted
            if not ok:
                log.warning("sign-up to %r: request not sent: %s", list_name, reply.summary())
    except Exception:
        log.exception("sign-up: the confirmation request could not be sent")


@router.post("/subscribe")
async def subscribe(request: Request, background: BackgroundTasks) -> Response:
    """Sign an address up to a public list (see the module)."""
    as_json = _wants_json(request)
    host = login_limits.client_key(request.client.host if request.client else None)
    if await run_in_threadpool(_count, request, f"signup:{host}") > IP_LIMIT:
        return _refusal(request, 429, TOO_MANY, None, as_json)
    try:
        fields = await _fields(request, as_json)
        lst = await run_in_threadpool(_list, request, fields.get("list", ""))
        if lst is None:
            return _refusal(request, 404, CLOSED, "list", as_json)
        if fields.get(signup.HONEYPOT, "").strip():
            return _answer(request, lst, as_json)
        address = normalize(fields.get("email", "")[:320], field="email")
        name = signup.check_name(fields.get("name", ""))
    except SendDockError as exc:
        return _refusal(request, exc.status, exc.message, exc.field, as_json)
    client = request.client.host if request.client else host
    agent = request.headers.get("user-agent", "")
    background.add_task(_sign_up_and_mail, request, lst, address, name, client, agent)
    return _answer(request, lst, as_json)
