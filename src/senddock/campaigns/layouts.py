"""Layouts: reusable templates a campaign's body goes into, checked when they are written.

A layout is an HTML template (and optionally its own text one) with `{{ content }}` where the
body goes; a campaign names one, or gets the default layout when it names none. A layout is
checked at add and edit as a campaign body is (syntax, the sandbox's limits, misspelt names),
with the same one-line errors; it is refused while a broadcast that uses it is under way, and
cannot be deleted while any campaign names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from senddock.audience import segments
from senddock.campaigns.template_check import _sample, check_names
from senddock.db import sql
from senddock.errors import Conflict, Invalid, NotFound
from senddock.messages import Links, check_header, compile_message, html_to_text
from senddock.messages.layout import Layout, bodies, check_markdown_syntax, has_slot
from senddock.messages.render import MAX_BODY, Recipient, SampleAttributes, TemplateProblem

QUERIES = sql.load(__package__, "layouts.sql")
MAX_NAME = 200
# What `--layout` / `"layout"` says for a campaign without one, even when a default is set.
NO_LAYOUT = "none"


class UnknownLayout(NotFound, LookupError):
    """No layout by that name or id (404)."""


class LayoutInUse(Conflict, ValueError):
    """A layout that campaigns name cannot be deleted, nor edited mid-broadcast (409)."""


class LayoutProblem(Invalid, ValueError):
    """A layout that cannot be stored as given (422, naming the field)."""


@dataclass(frozen=True)
class LayoutRow:
    id: int
    name: str
    html_body: str
    text_body: str | None
    is_default: bool
    campaigns: int  # campaigns that name it
    created_at: datetime
    updated_at: datetime

    @property
    def layout(self) -> Layout:
        return Layout(self.html_body, self.text_body)


Conn = psycopg.Connection[dict[str, Any]]


def _row(r: dict[str, Any]) -> LayoutRow:
    return LayoutRow(**{**r, "campaigns": int(r["campaigns"])})


def check_layout(conn: Conn, name: str, html_body: str, text_body: str | None) -> None:
    """Everything a layout could fail with mid-broadcast, now: LayoutProblem or TemplateProblem
    (part and line, field `html_body` / `text_body`) or HeaderError (the name)."""
    check_header("layout name", name, field="name")
    if not name.strip() or len(name) > MAX_NAME or name.strip().lower() == NO_LAYOUT:
        raise LayoutProblem(
            f"a layout needs a name of 1 to {MAX_NAME} characters, not {NO_LAYOUT!r}", field="name"
        )
    for what, body in (("html_body", html_body), ("text_body", text_body)):
        if body is None:
            continue
        if len(body.encode()) > MAX_BODY:
            raise LayoutProblem(f"the layout's {what} is over 2 MB", field=what)
        if not has_slot(body):
            raise LayoutProblem(
                f"the layout's {what} has no {{{{ content }}}}: where would the body go?",
                field=what,
            )
    # A sample body in the slot: the layout's own errors, on the layout's own lines, the
    # HTML's first (a text part derived from it would fail on the same tag).
    text, html = bodies(Layout(html_body, text_body), "Body.", "<p>Body.</p>")
    compile_message("Layout check", "layout@example.org", "Body.", html)
    compile_message("Layout check", "layout@example.org", text, html)
    check_names(conn, [], "Layout check", text, html)


def _find(conn: Conn, ref: str | int) -> LayoutRow:
    """The layout `ref` (a name, or an id), row-locked in the caller's transaction."""
    if isinstance(ref, int):
        r = conn.execute(QUERIES["by_id"], {"id": ref}).fetchone()
    else:
        r = conn.execute(QUERIES["by_name"], {"name": ref.strip()}).fetchone()
    if r is None:
        raise UnknownLayout(f"no layout {ref!r}", field="layout")
    return _row(r)


def get_layout(conn: Conn, ref: str | int) -> LayoutRow:
    with conn.transaction():
        return _find(conn, ref)


def list_layouts(conn: Conn) -> list[LayoutRow]:
    return [_row(r) for r in conn.execute(QUERIES["all"]).fetchall()]


def _taken(name: str) -> Conflict:
    return Conflict(f"a layout named {name!r} exists already", field="name")


def add_layout(
    conn: Conn, name: str, html_body: str, text_body: str | None = None, *, default: bool = False
) -> int:
    """Check and store a layout (the default one if `default`); its id."""
    check_layout(conn, name, html_body, text_body or None)
    try:
        with conn.transaction():
            r = conn.execute(
                QUERIES["insert"],
                {"name": name.strip(), "html": html_body, "text": text_body or None},
            ).fetchone()
            assert r is not None
            if default:
                conn.execute(QUERIES["clear_default"])
                conn.execute(QUERIES["set_default"], {"id": r["id"]})
    except psycopg.errors.UniqueViolation as exc:
        raise _taken(name) from exc
    return int(r["id"])


def edit_layout(
    conn: Conn,
    ref: str | int,
    *,
    name: str | None = None,
    html_body: str | None = None,
    text_body: str | None = None,
) -> LayoutRow:
    """Change a layout's name or templates (text_body "" removes its own text part)."""
    with conn.transaction():
        old = _find(conn, ref)
        busy = [r["id"] for r in conn.execute(QUERIES["active_users"], {"id": old.id})]
        if busy and (html_body is not None or text_body is not None):
            ids = ", ".join(str(i) for i in busy)
            raise LayoutInUse(
                f"layout {old.name!r} is in a broadcast under way (campaign {ids}): its"
                " workers compiled it once; edit it when that broadcast ends, or add another"
            )
    new_name = old.name if name is None else name.strip()
    html = old.html_body if html_body is None else html_body
    text = old.text_body if text_body is None else (text_body or None)
    check_layout(conn, new_name, html, text)
    try:
        with conn.transaction():
            _find(conn, old.id)
            conn.execute(
                QUERIES["update"], {"id": old.id, "name": new_name, "html": html, "text": text}
            )
            return _find(conn, old.id)
    except psycopg.errors.UniqueViolation as exc:
        raise _taken(new_name) from exc


def delete_layout(conn: Conn, ref: str | int) -> None:
    """Delete a layout no campaign names; LayoutInUse (409) otherwise."""
    with conn.transaction():
        row = _find(conn, ref)
        if row.campaigns:
            raise LayoutInUse(
                f"layout {row.name!r} is used by {row.campaigns} campaign(s): it cannot be"
                " deleted (edit it instead)"
            )
        conn.execute(QUERIES["delete"], {"id": row.id})


def set_default(conn: Conn, ref: str | int | None) -> LayoutRow | None:
    """Make `ref` the default layout (None: no default); the new default."""
    with conn.transaction():
        row = _find(conn, ref) if ref is not None else None
        conn.execute(QUERIES["clear_default"])
        if row is not None:
            conn.execute(QUERIES["set_default"], {"id": row.id})
            return _find(conn, row.id)
    return None


def layout_for_campaign(conn: Conn, layout: str | int | None) -> LayoutRow | None:
    """The layout a new campaign gets: the one named (or an id, as an edit keeps it), none
    for "none", else the default."""
    if isinstance(layout, int):
        return get_layout(conn, layout)
    if layout is not None and layout.strip().lower() == NO_LAYOUT:
        return None
    if layout:
        return get_layout(conn, layout)
    return default_layout(conn)


def default_layout(conn: Conn) -> LayoutRow | None:
    """The default layout, if one is set."""
    r = conn.execute(QUERIES["default"]).fetchone()
    return get_layout(conn, int(r["id"])) if r else None


class LayoutNotFound(Invalid, LookupError):
    """A campaign names a layout that does not exist: bad input (422, about `layout`)."""


@dataclass(frozen=True)
class Chosen:
    """A campaign's message templates with its layout around them, checked."""

    text: str | None
    html: str | None
    layout_id: int | None
    # The text body to store: as given, or for a Markdown body without one derived from it
    # here, once (the campaign row always holds a text or an HTML body).
    text_body: str | None


def checked_bodies(
    conn: Conn,
    layout: str | int | None,
    subject: str,
    from_addr: str,
    text_body: str | None,
    html_body: str | None,
    markdown_body: str | None,
) -> Chosen:
    """The body checked alone (its errors on its own lines), then inside its layout."""
    if markdown_body and html_body:
        raise Invalid("give html_body or markdown_body, not both", field="markdown_body")
    if markdown_body:
        check_markdown_syntax(markdown_body)
        if len(markdown_body.encode()) > MAX_BODY:
            raise Invalid(
                "the markdown body is over 2 MB; the limit is 2 MB", field="markdown_body"
            )
    text, html = bodies(None, text_body, html_body, markdown_body)
    if markdown_body and not text_body:
        text_body = text = html_to_text(html or "")
    try:
        compile_message(subject, from_addr, text, html)
    except TemplateProblem as exc:
        if markdown_body and exc.field == "html_body":  # the HTML made from the Markdown
            raise TemplateProblem(str(exc), field="markdown_body") from exc
        raise
    try:
        row = layout_for_campaign(conn, layout)
    except UnknownLayout as exc:
        raise LayoutNotFound(exc.message, field="layout") from exc
    if row is None:
        return Chosen(text, html, None, text_body)
    text, html = bodies(row.layout, text_body, html_body, markdown_body)
    return Chosen(text, html, row.id, text_body)


def first_recipient(
    conn: Conn, list_ids: list[int], audience_filter: str | None
) -> Recipient | None:
    """The first subscriber a broadcast to these lists, narrowed by `audience_filter`, would
    go to now, as a preview or a test renders them; None when there is nobody."""
    row = segments.first(conn, audience_filter, list_ids) if list_ids else None
    if row is None:
        return None
    attributes = SampleAttributes(row.attributes or {})
    return Recipient(row.email, row.name, attributes, row.id)


@dataclass(frozen=True)
class DraftPreview:
    """A draft's message for one sample subscriber, rendered now (nothing is stored)."""

    subject: str
    text: str
    html: str | None
    recipient: str


def preview_draft(
    conn: Conn,
    links: Links,
    *,
    list_names: list[str],
    subject: str,
    from_addr: str,
    text_body: str | None,
    html_body: str | None,
    markdown_body: str | None,
    layout: str | None,
    segment: str | None = None,
    audience_filter: str | None = None,
) -> DraftPreview:
    """What a campaign of these fields would send to the first of its audience (its lists
    narrowed by its own filter, else by its segment's; a sample subscriber when there is
    nobody): the same checks and errors as create."""
    chosen = checked_bodies(conn, layout, subject, from_addr, text_body, html_body, markdown_body)
    message = compile_message(subject, from_addr, chosen.text, chosen.html, links=links)
    ids = [r["id"] for r in conn.execute(QUERIES["lists_named"], {"names": list_names})]
    if not audience_filter and segment:
        audience_filter = segments.find(conn, segment).filter
    rcpt = first_recipient(conn, ids, audience_filter) or _sample(conn, ids)[0]
    subject_out, text, html = message.parts(rcpt)
    return DraftPreview(subject_out, text, html, rcpt.email)


# What a layout's preview puts in its slot: a body with the elements campaigns use.
SAMPLE_HTML = (
    "<h1>A headline for this issue</h1>"
    "<p>Hello {{ subscriber.name or 'there' }}, this is where a campaign's body goes: its"
    ' paragraphs, <a href="https://example.org/">its links</a> and <strong>emphasis</strong>.'
    "</p><h2>A second heading</h2><ul><li>a list item</li><li>another one</li></ul>"
    "<p>A last paragraph, and a sign-off.</p>"
)
SAMPLE_TEXT = (
    "Hello {{ subscriber.name or 'there' }}, this is where a campaign's body goes.\n\n"
    "A last paragraph, and a sign-off."
)


def preview_layout(conn: Conn, links: Links, html_body: str, text_body: str | None) -> DraftPreview:
    """A layout with a sample body in its slot, for a made-up subscriber: what the layout
    editor and the starters' gallery show. The same errors as `check_layout` for the
    templates themselves."""
    if not has_slot(html_body):
        raise LayoutProblem(
            "the layout's html_body has no {{ content }}: where would the body go?",
            field="html_body",
        )
    text, html = bodies(Layout(html_body, text_body or None), SAMPLE_TEXT, SAMPLE_HTML)
    message = compile_message("A sample subject", "preview@example.org", text, html, links=links)
    rcpt = _sample(conn, [])[0]
    subject, text_out, html_out = message.parts(rcpt)
    return DraftPreview(subject, text_out, html_out, rcpt.email)
