"""The preference page every message links to (`{{ preferences_url }}`, and from the
unsubscribe page): a subscriber's lists, to leave or rejoin, and "unsubscribe from everything".

GET  /preferences/TOKEN  the page; changes nothing (mail scanners follow links).
POST /preferences/TOKEN  one change: form fields `form` (the form token), `action` (join,
                         leave, unsubscribe_all) and `list` (a list id, for join and leave).

TOKEN is the signed link of the message (messages/links.py, purpose `preferences`): forged or
cut, 403; for a subscriber deleted since, 404. Each form carries a second token, signed for
this subscriber and the minute the page was made, and accepted for FORM_MINUTES: a form
posted from elsewhere, for another subscriber, or from a page left open too long gets 403 and
changes nothing. Bodies are capped like every public one (web/guard.py, 64 KiB).
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from typing import Any, cast, get_args

import psycopg
from psycopg.rows import DictRow
from psycopg_pool import ConnectionPool
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from senddock.audience import preferences
from senddock.errors import SendDockError
from senddock.messages import PREFERENCES, sign, verify

Pool = ConnectionPool[psycopg.Connection[DictRow]]
Page = Callable[[str, str, int], HTMLResponse]

FORM = "preferences-form"
FORM_MINUTES = 120  # how long a page's forms stay good
ACTIONS = get_args(preferences.Action)
STATUS = {
    "confirmed": "subscribed",
    "unconfirmed": "subscribed (waiting for confirmation)",
    "unsubscribed": "left",
    None: "not subscribed",
}
FORGED = (
    "<p>This link is not valid: it may have been cut or changed. "
    "Use the link from the message itself.</p>"
)
STALE = "<p>This form has expired or is not yours: reload the page and try again.</p>"


def form_token(key: bytes, subscriber_id: int, minute: int | None = None) -> str:
    """The token a page's forms carry: this subscriber, the minute the page was made."""
    return sign(key, FORM, subscriber_id, int(time.time() // 60) if minute is None else minute)


def form_ok(key: bytes, subscriber_id: int, token: str) -> bool:
    ids = verify(key, FORM, token)
    if ids is None or len(ids) != 2 or ids[0] != subscriber_id:
        return False
    return 0 <= time.time() // 60 - ids[1] <= FORM_MINUTES


def _button(token: str, action: str, label: str, list_id: int | None = None) -> str:
    listed = f'<input type="hidden" name="list" value="{list_id}">' if list_id else ""
    return (
        f'<form method="post"><input type="hidden" name="form" value="{html.escape(token)}">'
        f'<input type="hidden" name="action" value="{action}">{listed}'
        f'<button type="submit">{html.escape(label)}</button></form>'
    )


def render(prefs: preferences.Preferences, token: str, notice: str = "") -> str:
    """The page's body: who, a row per list with its one button, and the last button."""
    who = html.escape(prefs.email)
    if prefs.name:
        who = f"{html.escape(prefs.name)} &lt;{who}&gt;"
    parts = [f"<p>Preferences for <b>{who}</b>.</p>"]
    if notice:
        parts.append(f'<p role="status"><b>{html.escape(notice)}</b></p>')
    if prefs.suppressed == "unsubscribe":
        parts.append("<p>You are unsubscribed from everything. Join a list to receive it.</p>")
    elif prefs.suppressed:
        parts.append("<p>This address receives no messages from us.</p>")
    rows = []
    for choice in prefs.lists:
        if choice.receiving and prefs.suppressed is None:
            state, button = STATUS[choice.status], _button(token, "leave", "Leave", choice.id)
        else:
            state = "left" if choice.receiving else STATUS[choice.status]
            button = _button(token, "join", "Join", choice.id)
        rows.append(
            f"<tr><td>{html.escape(choice.name)}</td><td>{state}</td><td>{button}</td></tr>"
        )
    if rows:
        parts.append(
            "<table><thead><tr><th>List</th><th>Status</th><th></th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>"
        )
    if prefs.suppressed is None:
        parts.append(_button(token, "unsubscribe_all", "Unsubscribe from everything"))
    return "".join(parts)


NOTICES = {
    "join": "You joined {name}.",
    "leave": "You left {name}.",
    "unsubscribe_all": "You are unsubscribed from everything.",
}


class PreferencePages:
    """GET and POST /preferences/TOKEN, on the app's pool and link key."""

    def __init__(self, pool: Pool, key: Callable[[], bytes], page: Page) -> None:
        self.pool = pool
        self.key = key
        self.page = page

    def _ids(self, request: Request) -> tuple[int, int] | None:
        ids = verify(self.key(), PREFERENCES, str(request.path_params["token"]))
        if ids is None or len(ids) != 2:
            return None
        return ids[0], ids[1]

    def _load(self, subscriber_id: int) -> preferences.Preferences:
        with self.pool.connection() as conn:
            return preferences.load(conn, subscriber_id)

    def _change(
        self, subscriber_id: int, action: preferences.Action, list_id: int | None, campaign: int
    ) -> preferences.Preferences:
        with self.pool.connection() as conn:
            preferences.change(conn, subscriber_id, action, list_id, campaign)
            return preferences.load(conn, subscriber_id)

    def _failed(self, exc: SendDockError) -> HTMLResponse:
        return self.page("Preferences", f"<p>{html.escape(exc.message)}</p>", exc.status)

    async def show(self, request: Request) -> Response:
        ids = self._ids(request)
        if ids is None:
            return self.page("Link not valid", FORGED, 403)
        try:
            prefs = await run_in_threadpool(self._load, ids[0])
        except SendDockError as exc:
            return self._failed(exc)
        return self.page("Your subscriptions", render(prefs, form_token(self.key(), ids[0])), 200)

    async def submit(self, request: Request) -> Response:
        ids = self._ids(request)
        if ids is None:
            return self.page("Link not valid", FORGED, 403)
        form = await request.form(max_files=0, max_fields=8)
        fields: dict[str, Any] = {k: str(v) for k, v in form.items()}
        if not form_ok(self.key(), ids[0], fields.get("form", "")):
            return self.page("Form expired", STALE, 403)
        action = fields.get("action", "")
        raw_list = fields.get("list", "")
        listed = raw_list.isdigit() and len(raw_list) <= 18  # a bigint
        if action not in ACTIONS or (action != "unsubscribe_all" and not listed):
            return self.page("Preferences", "<p>That choice is not one this page offers.</p>", 422)
        list_id = int(raw_list) if action != "unsubscribe_all" else None
        try:
            prefs = await run_in_threadpool(
                self._change, ids[0], cast(preferences.Action, action), list_id, ids[1]
            )
        except SendDockError as exc:
            return self._failed(exc)
        name = next((c.name for c in prefs.lists if c.id == list_id), "")
        notice = NOTICES[action].format(name=name)
        body = render(prefs, form_token(self.key(), ids[0]), notice)
        return self.page("Your subscriptions", body, 200)
