"""Layout pages: the list with a form for a new one and the starters' gallery, one layout's
edit form with its live preview, delete, and the campaign form's live preview. Every change
goes through campaigns/layouts.py (and campaigns/starters.py for a starter).

The preview is the rendered message of the form's fields for a sample subscriber, answered
into the form's `<iframe sandbox>` under a policy of its own (`sandbox`, no script, no
request anywhere but inline images and styles), so a hostile body or subscriber name runs
nothing, neither framed nor opened on its own.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form
from markupsafe import escape
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from senddock.campaigns import layouts, starters
from senddock.campaigns.compose import link_key
from senddock.errors import SendDockError
from senddock.messages import Links
from senddock.web.dashboard.gate import LoggedIn
from senddock.web.dashboard.views import Conn, db, flash, not_found, redirect, render

router = APIRouter(include_in_schema=False, route_class=LoggedIn)

# The preview document's own headers: a sandboxed, script-less document that only this
# dashboard may frame. It keeps the dashboard's origin (`allow-same-origin`, never with
# `allow-scripts`): Chromium puts an opaque-origin frame in a process of its own, and a click
# on Save draft just after a scroll went to that frame instead (issue 35; 4 of 4 in Chromium
# 156). Nothing in it can run: the sandbox and `default-src 'none'` each forbid scripts.
PREVIEW_HEADERS = {
    "Content-Security-Policy": "sandbox allow-same-origin; default-src 'none'; img-src data:; "
    "style-src 'unsafe-inline'; frame-ancestors 'self'",
    "X-Frame-Options": "SAMEORIGIN",
    "Cache-Control": "no-store",
}


def _page(request: Request, conn: Conn, status: int = 200, **extra: object) -> Response:
    extra.setdefault("form", {"name": "", "html_body": "", "text_body": "", "is_default": False})
    extra.setdefault("error", "")
    rows = layouts.list_layouts(conn)
    return render(
        request,
        "layouts.html",
        status,
        title="Layouts",
        layouts=rows,
        starters=starters.STARTERS,
        **extra,
    )


@router.get("/layouts")
def layout_list(request: Request) -> Response:
    with db(request) as conn:
        return _page(request, conn)


def _lines(text: str) -> str:
    return text.replace("\r\n", "\n")


class LayoutForm(BaseModel):
    """The fields of a layout's form (new and edit alike)."""

    name: str = ""
    html_body: str = ""
    text_body: str = ""
    is_default: bool = False

    def shown(self) -> dict[str, Any]:
        """The fields as the form shows them again after a refusal."""
        return {**self.model_dump(), "html_body": self.html, "text_body": self.text or ""}

    @property
    def html(self) -> str:
        return _lines(self.html_body)

    @property
    def text(self) -> str | None:
        return _lines(self.text_body) or None


@router.post("/layouts")
def layout_add(request: Request, form: Annotated[LayoutForm, Form()]) -> Response:
    with db(request) as conn:
        try:
            layouts.add_layout(conn, form.name, form.html, form.text, default=form.is_default)
        except SendDockError as exc:
            return _page(request, conn, 422, form=form.shown(), error=exc.message)
    flash(request, f"Layout “{form.name.strip()}” saved.")
    return redirect("/layouts")


def _edit_page(request: Request, conn: Conn, layout_id: int, error: str = "") -> Response:
    """The layout's edit form (with the refusal of a save, 422, if `error`)."""
    try:
        row = layouts.get_layout(conn, layout_id)
    except layouts.UnknownLayout:
        return not_found(request, f"There is no layout {layout_id}.")
    status = 422 if error else 200
    return render(request, "layout_edit.html", status, title=row.name, layout=row, error=error)


@router.get("/layouts/{layout_id:int}")
def layout_edit_form(request: Request, layout_id: int) -> Response:
    with db(request) as conn:
        return _edit_page(request, conn, layout_id)


@router.post("/layouts/{layout_id:int}")
def layout_save(request: Request, layout_id: int, form: Annotated[LayoutForm, Form()]) -> Response:
    with db(request) as conn:
        try:
            row = layouts.edit_layout(
                conn, layout_id, name=form.name, html_body=form.html, text_body=form.text or ""
            )
            if form.is_default != row.is_default:
                layouts.set_default(conn, layout_id if form.is_default else None)
        except SendDockError as exc:
            return _edit_page(request, conn, layout_id, exc.message)
    flash(request, f"Layout “{row.name}” saved.")
    return redirect("/layouts")


@router.post("/layouts/{layout_id:int}/delete")
def layout_delete(request: Request, layout_id: int) -> Response:
    with db(request) as conn:
        try:
            layouts.delete_layout(conn, layout_id)
        except SendDockError as exc:
            flash(request, exc.message, "error")
            return redirect("/layouts")
    flash(request, "Layout deleted.")
    return redirect("/layouts")


def _preview(request: Request, html_body: str, text_body: str | None) -> Response:
    """A layout's preview document: a sample body in it, or the reason it cannot be shown."""
    settings = request.app.state.settings
    with db(request) as conn:
        try:
            links = Links(settings.public_url, link_key(conn, settings), 0, "")
            shown = layouts.preview_layout(conn, links, html_body, text_body)
        except SendDockError as exc:
            body = f'<p role="alert" style="color:#a00">{escape(exc.message)}</p>'
            return HTMLResponse(body, status_code=200, headers=PREVIEW_HEADERS)
    assert shown.html is not None  # a layout has an HTML part
    return HTMLResponse(shown.html, headers=PREVIEW_HEADERS)


@router.get("/layouts/starters/{key}/preview")
def starter_preview(request: Request, key: str) -> Response:
    """A starter layout with a sample body: the gallery's thumbnails."""
    try:
        starter = starters.find(key)
    except starters.UnknownStarter:
        return not_found(request, f"There is no starter layout {key!r}.")
    return _preview(request, starters.html(starter.key), starters.TEXT)


class StarterForm(BaseModel):
    name: str = ""


@router.post("/layouts/starters/{key}")
def starter_add(request: Request, key: str, form: Annotated[StarterForm, Form()]) -> Response:
    """Use a starter: stored as a layout of its own, then opened in the editor."""
    with db(request) as conn:
        try:
            layout_id = starters.add(conn, key, form.name.strip() or None)
        except SendDockError as exc:
            return _page(request, conn, 422, error=exc.message)
        row = layouts.get_layout(conn, layout_id)
    flash(request, f"Layout “{row.name}” added from a starter: edit it to make it yours.")
    return redirect(f"/layouts/{layout_id}")


@router.post("/layouts/preview")
def layout_preview(request: Request, form: Annotated[LayoutForm, Form()]) -> Response:
    """The layout form's fields with a sample body, for the editor's preview frame."""
    return _preview(request, form.html, form.text)


class PreviewForm(BaseModel):
    """The campaign form's fields a preview renders (the rest are the draft's own)."""

    lists: list[str] = []
    subject: str = ""
    from_addr: str = ""
    text_body: str = ""
    html_body: str = ""
    markdown_body: str = ""
    layout: str = ""
    segment: str = ""
    filter: str = ""


@router.post("/campaigns/preview")
def campaign_preview(request: Request, form: Annotated[PreviewForm, Form()]) -> Response:
    """The campaign form's fields rendered for a sample subscriber, for its preview frame."""
    settings = request.app.state.settings
    with db(request) as conn:
        try:
            links = Links(settings.public_url, link_key(conn, settings), 0, "")
            shown = layouts.preview_draft(
                conn,
                links,
                list_names=[n for n in form.lists if n],
                subject=form.subject or "(no subject)",
                from_addr=form.from_addr.strip() or "preview@example.org",
                text_body=_lines(form.text_body) or None,
                html_body=_lines(form.html_body) or None,
                markdown_body=_lines(form.markdown_body) or None,
                layout=form.layout or None,
                segment=form.segment.strip() or None,
                audience_filter=form.filter.strip() or None,
            )
        except SendDockError as exc:
            body = f'<p role="alert" style="color:#a00">{escape(exc.message)}</p>'
            return HTMLResponse(body, status_code=200, headers=PREVIEW_HEADERS)
    head = f"<p><b>{escape(shown.subject)}</b> · to {escape(shown.recipient)}</p><hr>"
    if shown.html is not None:
        return HTMLResponse(head + shown.html, headers=PREVIEW_HEADERS)
    return HTMLResponse(f"{head}<pre>{escape(shown.text)}</pre>", headers=PREVIEW_HEADERS)
