"""One subscriber's page: add them, edit their name and attributes, join and leave lists, and
read their messages and bounces a page at a time. Changes go through audience.subscribers;
reads through web/queries.py. A refused change shows its one line on the page it came from,
with the status of the error (SendDockError), and changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Form
from starlette.requests import Request
from starlette.responses import Response

from senddock.audience import optin, subscribers
from senddock.audience.lists import all_lists, find_list
from senddock.delivery import oneoff
from senddock.errors import Invalid, NotFound, SendDockError
from senddock.web import queries
from senddock.web.dashboard.gate import LoggedIn
from senddock.web.dashboard.views import Conn, Page, db, flash, redirect, render

router = APIRouter(include_in_schema=False, route_class=LoggedIn)

# The attributes box holds one JSON object; its text is at most this long (the form body has
# its own cap, web/guard.py: this one keeps a subscriber row a size the pages can show).
ATTRIBUTES_MAX = 16 * 1024


def parse_attributes(text: str) -> dict[str, Any]:
    """The attributes typed in the form: a JSON object (empty text is `{}`); Invalid about
    `attributes` with the reason otherwise."""
    raw = text.strip()
    if not raw:
        return {}
    if len(raw) > ATTRIBUTES_MAX:
        raise Invalid(f"attributes: at most {ATTRIBUTES_MAX:,} characters", field="attributes")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise Invalid(f"attributes are not valid JSON: {exc}", field="attributes") from exc
    if not isinstance(value, dict):
        raise Invalid(
            'attributes must be a JSON object, like {"city": "London"}', field="attributes"
        )
    return value


def _email_of(conn: Conn, subscriber_id: int) -> str:
    email = queries.subscriber_email(conn, subscriber_id)
    if email is None:
        raise NotFound(f"There is no subscriber {subscriber_id}.")
    return email


@router.get("/subscribers/new")
def new_subscriber_form(request: Request) -> Response:
    with db(request) as conn:
        lists = all_lists(conn)
    form = {"email": "", "name": "", "attributes": "", "lists": []}
    return render(
        request, "subscriber_new.html", title="Add a subscriber", lists=lists, form=form, error=""
    )


@router.post("/subscribers")
def add_subscriber(
    request: Request,
    email: Annotated[str, Form()] = "",
    name: Annotated[str, Form()] = "",
    attributes: Annotated[str, Form()] = "",
    lists: Annotated[list[str] | None, Form()] = None,
) -> Response:
    chosen = [n for n in (lists or []) if n]
    form = {"email": email, "name": name, "attributes": attributes, "lists": chosen}
    with db(request) as conn:
        try:
            sid = subscribers.add(conn, email, name, parse_attributes(attributes), tuple(chosen))
        except SendDockError as exc:
            return render(
                request,
                "subscriber_new.html",
                exc.status,
                title="Add a subscriber",
                lists=all_lists(conn),
                form=form,
                error=exc.message,
            )
        address = queries.subscriber_email(conn, sid) or email
        rows = optin.waiting(conn, address)
    flash(request, f"{email.strip()} added." + asked_to_confirm(request, rows, address))
    return redirect(f"/subscribers/{sid}")


def asked_to_confirm(request: Request, rows: Waiting, email: str) -> str:
    """Mail the confirmation request of each membership that waits for one (`rows`, from
    optin.waiting: a double opt-in list, as `subscribers add` and the API do), with no
    database connection held, and say how each went: '' when none waits. A relay that refuses
    is said, never raised: the membership stays."""
    state, said = request.app.state, ""
    settings = state.settings
    for name, reply in oneoff.send(settings, optin.requests(rows, state.link_key, settings)):
        if reply.accepted:
            said += f" A confirmation request for {name} went to {email}."
        else:
            said += f" The confirmation request for {name} was not sent ({reply.summary()})."
    return said


def _page(
    request: Request,
    subscriber_id: int,
    hpage: str | None = None,
    bpage: str | None = None,
    form: dict[str, str] | None = None,
    error: str = "",
    status_code: int = 200,
) -> Response:
    history, bounced = Page.of(hpage), Page.of(bpage)
    with db(request) as conn:
        found = queries.subscriber(conn, subscriber_id)
        if found is None:
            raise NotFound(f"There is no subscriber {subscriber_id}.")
        memberships = queries.subscriber_lists(conn, subscriber_id)
        jobs = queries.subscriber_history(conn, subscriber_id, history.limit, history.offset)
        bounces = queries.subscriber_bounces(
            conn, subscriber_id, found["email"], bounced.limit, bounced.offset
        )
        on = {m["name"] for m in memberships}
        others = [entry for entry in all_lists(conn) if entry.name not in on]
    shown = form or {
        "name": found["name"],
        "attributes": json.dumps(found["attributes"], ensure_ascii=False, indent=2),
    }
    return render(
        request,
        "subscriber.html",
        status_code,
        title=found["email"],
        s=found,
        form=shown,
        error=error,
        memberships=memberships,
        others=others,
        jobs=jobs[: history.size],
        hpage=history.number,
        hmore=len(jobs) > history.size,
        bounces=bounces[: bounced.size],
        bpage=bounced.number,
        bmore=len(bounces) > bounced.size,
    )


@router.get("/subscribers/{subscriber_id:int}")
def subscriber_page(
    request: Request, subscriber_id: int, hpage: str = "1", bpage: str = "1"
) -> Response:
    return _page(request, subscriber_id, hpage, bpage)


@router.post("/subscribers/{subscriber_id:int}")
def edit_subscriber(
    request: Request,
    subscriber_id: int,
    name: Annotated[str, Form()] = "",
    attributes: Annotated[str, Form()] = "",
) -> Response:
    """Name and attributes as typed: the box is the whole object, so a key taken out of it is
    removed (update merges; a null removes)."""
    try:
        with db(request) as conn:
            email = _email_of(conn, subscriber_id)
            wanted = parse_attributes(attributes)
            found = queries.subscriber(conn, subscriber_id)
            old = found["attributes"] if found else {}
            merged: dict[str, Any] = {key: None for key in old if key not in wanted}
            merged.update(wanted)
            subscribers.update(conn, email, name=name, attributes=merged)
    except NotFound:
        raise
    except SendDockError as exc:
        form = {"name": name, "attributes": attributes}
        return _page(request, subscriber_id, form=form, error=exc.message, status_code=exc.status)
    flash(request, "Saved.")
    return redirect(f"/subscribers/{subscriber_id}")


Waiting = list[optin.Awaiting]


def _membership(
    request: Request, subscriber_id: int, change: Callable[[Conn, str], tuple[str, Waiting]]
) -> Response:
    """Apply `change` to the subscriber's address; its line, or the refusal's, on their page;
    then, the connection given back, the confirmation requests it left waiting."""
    with db(request) as conn:
        email = _email_of(conn, subscriber_id)
        try:
            said, rows = change(conn, email)
        except SendDockError as exc:
            flash(request, exc.message, "error")
            return redirect(f"/subscribers/{subscriber_id}")
    flash(request, said + asked_to_confirm(request, rows, email))
    return redirect(f"/subscribers/{subscriber_id}")


@router.post("/subscribers/{subscriber_id:int}/join")
def join_list(
    request: Request, subscriber_id: int, list_name: Annotated[str, Form()] = ""
) -> Response:
    wanted = list_name.strip()

    def join(conn: Conn, email: str) -> tuple[str, Waiting]:
        find_list(conn, wanted)  # the page offers existing lists: never make one here
        subscribers.update(conn, email, lists=(wanted,))
        return f"{email} joined {wanted}.", optin.waiting(conn, email)

    return _membership(request, subscriber_id, join)


@router.post("/subscribers/{subscriber_id:int}/leave")
def leave_list(
    request: Request, subscriber_id: int, list_name: Annotated[str, Form()] = ""
) -> Response:
    def leave(conn: Conn, email: str) -> tuple[str, Waiting]:
        return subscribers.remove(conn, email, list_name) + ".", []

    return _membership(request, subscriber_id, leave)
