"""What every dashboard page shares: the database, the templates, flash messages, paging."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import jinja2
import psycopg
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse

from senddock.campaigns import reply_line
from senddock.errors import SendDockError
from senddock.web import auth

Conn = psycopg.Connection[dict[str, Any]]

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
PAGE_SIZE = 50
# Headers on every dashboard page: it shows addresses (never cache it) and has buttons that
# change things (never let another site frame it).
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}


def _when(value: datetime | None) -> str:
    """A timestamp as the dashboard shows it: minutes, in the database's time zone."""
    return value.strftime("%Y-%m-%d %H:%M") if value else "—"


# A template's `{{ … }}` as the campaign list shows a subject: the name it inserts, last part
# (`{{ subscriber.attributes.city | default("you") }}` reads ‹city›), not the template code.
_FIELD = re.compile(r"\{\{\s*([A-Za-z_][\w.]*)[^}]*\}\}")


def _fields(template: str) -> str:
    """A subject (or any one-line template) with its fields as ‹name› marks."""
    return _FIELD.sub(lambda m: f"‹{m.group(1).rsplit('.', 1)[-1]}›", template)


env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=True,  # our own pages: every value is HTML-escaped unless marked safe
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
env.filters["when"] = _when
env.filters["fields"] = _fields
env.filters["reply"] = reply_line  # a job's last reply, its enhanced code once


@contextmanager
def db(request: Request) -> Iterator[Conn]:
    """A connection from the app's pool (autocommit, dict rows)."""
    with request.app.state.pool.connection() as conn:
        yield cast(Conn, conn)


def flash(request: Request, message: str, kind: str = "ok") -> None:
    """Show `message` on the next page this browser loads."""
    request.session["flash"] = {"kind": kind, "message": message}


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render template `name` with the values every page needs (CSRF token, flash, nav)."""
    context.setdefault("title", "")
    context.setdefault("flash", request.session.pop("flash", None))
    context["request"] = request
    context["csrf"] = auth.csrf_token(request)
    context["logged_in"] = auth.session_admin(request) is not None
    context["path"] = request.url.path
    # The navigation's badge, read by the gate for a page (none on a page it did not open).
    context["nav_unconfirmed"] = getattr(request.state, "nav_unconfirmed", 0)
    body = env.get_template(name).render(context)
    return HTMLResponse(body, status_code=status_code, headers=PAGE_HEADERS)


def redirect(url: str) -> RedirectResponse:
    """See other: after a form POST, the browser GETs `url`."""
    return RedirectResponse(url, status_code=303)


def not_found(request: Request, what: str) -> HTMLResponse:
    return render(request, "error.html", 404, title="Not found", message=what)


TITLES = {404: "Not found", 409: "Not possible now", 503: "Not available yet"}


def error_page(request: Request, exc: SendDockError) -> HTMLResponse:
    """The page of a failure no form or button of the page took care of, with its status."""
    title = TITLES.get(exc.status, "Refused")
    return render(request, "error.html", exc.status, title=title, message=exc.message)


@dataclass(frozen=True)
class Page:
    """One page of a long table: rows number `offset`+1 onwards."""

    number: int
    size: int = PAGE_SIZE

    @classmethod
    def of(cls, raw: str | None) -> Page:
        """Page from the `page` query value; anything odd is page 1 (a link, not an API)."""
        try:
            number = int(raw or "1")
        except ValueError:
            number = 1
        return cls(min(max(number, 1), 100_000))

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.size

    @property
    def limit(self) -> int:
        """Rows to fetch: one more than shown, to know whether a next page exists."""
        return self.size + 1
