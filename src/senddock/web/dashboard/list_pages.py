"""Lists made and changed on the dashboard: create one (name, description, double opt-in with
its From), and on its own page rename it, describe it, switch double opt-in. Changes go
through audience.lists; a refused change shows its one line on the form, with its status."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from senddock.audience import lists
from senddock.errors import SendDockError
from senddock.web.dashboard.audience_pages import lists_with_forms
from senddock.web.dashboard.gate import LoggedIn
from senddock.web.dashboard.views import db, flash, redirect, render

router = APIRouter(include_in_schema=False, route_class=LoggedIn)


class ListForm(BaseModel):
    """The list form's fields as posted (a checkbox is sent only when checked)."""

    name: str = ""
    description: str = ""
    double_opt_in: str = ""
    from_addr: str = ""

    @property
    def opt_in(self) -> bool:
        return bool(self.double_opt_in)

    @property
    def sender(self) -> str | None:
        """The From to set; None (keep the list's) when the box is left empty."""
        return self.from_addr.strip() or None


Posted = Annotated[ListForm, Form()]


@router.post("/lists/new")
def create_list(request: Request, form: Posted) -> Response:
    with db(request) as conn:
        try:
            list_id = lists.create(
                conn, form.name, form.description, double_opt_in=form.opt_in, from_addr=form.sender
            )
        except SendDockError as exc:
            return render(
                request,
                "lists.html",
                exc.status,
                title="Lists",
                **lists_with_forms(request),
                error="",
                new=form,
                new_error=exc.message,
            )
    flash(request, f"List “{form.name.strip()}” created.")
    return redirect(f"/lists/{list_id}")


@router.get("/lists/{list_id:int}")
def list_page(request: Request, list_id: int) -> Response:
    with db(request) as conn:
        found = lists.get_list(conn, list_id)  # UnknownListId: the error page, 404
    form = ListForm(
        name=found.name,
        description=found.description,
        double_opt_in="on" if found.double_opt_in else "",
    )
    return render(request, "list.html", title=found.name, l=found, form=form, error="")


@router.post("/lists/{list_id:int}")
def edit_list(request: Request, list_id: int, form: Posted) -> Response:
    with db(request) as conn:
        found = lists.get_list(conn, list_id)
        try:
            lists.change(
                conn,
                list_id,
                name=form.name,
                description=form.description,
                double_opt_in=form.opt_in,
                from_addr=form.sender,
            )
        except SendDockError as exc:
            return render(
                request,
                "list.html",
                exc.status,
                title=found.name,
                l=found,
                form=form,
                error=exc.message,
            )
    flash(request, f"List “{form.name.strip()}” saved.")
    return redirect(f"/lists/{list_id}")
