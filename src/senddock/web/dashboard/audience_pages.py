"""Audience pages: subscribers (search, paginate), lists with the CSV import form, an import's
progress, and the suppression list (add, remove). Changes go through audience.* and imports."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Query, UploadFile
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from senddock.audience import signup, suppressions
from senddock.audience.lists import all_lists
from senddock.audience.segment_filter import MAX_LENGTH, SegmentError
from senddock.errors import SendDockError
from senddock.web import imports, queries
from senddock.web.dashboard import subscriber_bulk
from senddock.web.dashboard.gate import LoggedIn
from senddock.web.dashboard.views import Page, db, flash, not_found, redirect, render
from senddock.web.queries import like

router = APIRouter(include_in_schema=False, route_class=LoggedIn)


# An attribute column's name as the page takes it (`cols=city,plan`): a key of the
# subscribers' attributes, at most MAX_COLUMNS of them.
_COLUMN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_COLUMNS = 6


def columns(text: str) -> list[str]:
    """The attribute columns asked for, in order, each once; what is not a key name is left
    out."""
    names = [c.strip() for c in text.split(",")]
    kept = [c for c in dict.fromkeys(names) if _COLUMN.fullmatch(c)]
    return kept[:MAX_COLUMNS]


@router.get("/subscribers")
def subscriber_list(
    request: Request,
    q: str = "",
    list_name: Annotated[str, Query(alias="list")] = "",
    filter_text: Annotated[str, Query(alias="filter", max_length=MAX_LENGTH)] = "",
    cols: Annotated[str, Query(max_length=500)] = "",
    page: str = "1",
) -> Response:
    at = Page.of(page)
    error, status = "", 200
    with db(request) as conn:
        try:
            rows = queries.subscribers_page(
                conn,
                like(q),
                list_name or None,
                at.limit,
                at.offset,
                order="email",
                filter_text=filter_text or None,
            )
            # How many the actions on everyone matching would touch (at most one past MAX):
            # a first page that is not full has them all; else counted, stopping past MAX.
            whole = at.number == 1 and len(rows) <= at.size
            where = (q, list_name, filter_text)
            count = len(rows) if whole else len(subscriber_bulk.matching(conn, where))
        except SegmentError as exc:  # the filter as typed, refused with its column
            rows, count, error, status = [], 0, exc.message, exc.status
        lists = all_lists(conn)
    return render(
        request,
        "subscribers.html",
        status,
        title="Subscribers",
        subscribers=rows[: at.size],
        lists=lists,
        q=q,
        list_name=list_name,
        filter_text=filter_text,
        filter_error=error,
        cols=cols,
        columns=columns(cols),
        matching=count,
        most=subscriber_bulk.MAX,
        page=at.number,
        more=len(rows) > at.size,
    )


def lists_with_forms(request: Request) -> dict[str, Any]:
    """Every list (`lists`), and the copy-paste sign-up form of each public one by id
    (`forms`, audience/signup.py): what lists.html shows."""
    with db(request) as conn:
        rows = all_lists(conn)
    key, url = request.app.state.link_key, request.app.state.settings.public_url
    forms = {row.id: signup.list_form(key, url, row) for row in rows if row.public}
    return {"lists": rows, "forms": forms}


@router.get("/lists")
def list_page(request: Request) -> Response:
    return render(request, "lists.html", title="Lists", **lists_with_forms(request), error="")


def _save(upload: UploadFile) -> Path:
    """The upload, copied to a file of its own for the import thread to read."""
    with tempfile.NamedTemporaryFile(prefix="senddock-import-", suffix=".csv", delete=False) as out:
        shutil.copyfileobj(upload.file, out, 1 << 20)
        return Path(out.name)


@router.post("/lists/import")
async def start_import(
    request: Request,
    list_name: Annotated[str, Form()] = "",
    file: Annotated[UploadFile | None, File()] = None,
) -> Response:
    name = list_name.strip()
    error = ""
    if not name:
        error = "Name the list to import into (a new name creates the list)."
    elif file is None or not file.filename:
        error = "Choose a CSV file to import."
    if error or file is None:
        shown = await run_in_threadpool(lists_with_forms, request)
        return render(request, "lists.html", 422, title="Lists", **shown, error=error)
    path = await run_in_threadpool(_save, file)
    job = await run_in_threadpool(imports.start_import, request.app.state, name, path)
    return redirect(f"/imports/{job}")


@router.get("/imports/{job_id}")
def import_page(request: Request, job_id: int) -> Response:
    with db(request) as conn:
        job = imports.get_import(conn, job_id)
    if job is None:
        return not_found(request, f"There is no import {job_id}.")
    return render(request, "import.html", title=f"Import into {job.list_name}", job=job)


@router.get("/suppressions")
def suppression_list(request: Request, q: str = "", reason: str = "", page: str = "1") -> Response:
    at = Page.of(page)
    shown = reason if reason in suppressions.REASONS else ""
    with db(request) as conn:
        rows = queries.suppressions_page(conn, like(q), shown or None, at.limit, at.offset)
    return render(
        request,
        "suppressions.html",
        title="Suppression list",
        rows=rows[: at.size],
        reasons=suppressions.REASONS,
        reason=shown,
        q=q,
        page=at.number,
        more=len(rows) > at.size,
    )


@router.post("/suppressions")
def suppress(
    request: Request, email: Annotated[str, Form()] = "", detail: Annotated[str, Form()] = ""
) -> Response:
    with db(request) as conn:
        try:
            added = suppressions.add(conn, email, "manual", detail.strip() or "dashboard")
        except SendDockError as exc:
            flash(request, exc.message, "error")
        else:
            address = email.strip()
            flash(request, f"{address} suppressed." if added else f"{address} already was.")
    return redirect("/suppressions")


@router.post("/suppressions/remove")
def unsuppress(request: Request, email: Annotated[str, Form()] = "") -> Response:
    with db(request) as conn:
        gone = suppressions.remove(conn, email)
    address = email.strip()
    if gone:
        flash(request, f"{address} may be sent to again.")
    else:
        flash(request, f"{address} was not suppressed.", "error")
    return redirect("/suppressions")
