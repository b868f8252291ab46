"""The API's layouts, /api/v1/layouts: the service `senddock layout` uses (campaigns/layouts.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Response
from fastapi import Path as PathParam
from pydantic import BaseModel, Field

from senddock.campaigns import layouts
from senddock.web import auth
from senddock.web import schemas as s
from senddock.web.api import Db
from senddock.web.errors import RESPONSES

router = APIRouter(
    prefix="/api/v1", dependencies=[Depends(auth.require_api_auth)], responses=RESPONSES
)
LayoutId = Annotated[int, PathParam(ge=1, le=s.BIGINT)]


class LayoutIn(s.Strict):
    name: s.Name
    html_body: s.Body = Field(description="HTML with {{ content }} where the body goes")
    text_body: s.Body | None = Field(default=None, description="Text with {{ content }}")
    is_default: bool = False


class LayoutEdit(s.Strict):
    name: s.Name | None = None
    html_body: s.Body | None = None
    text_body: s.Body | None = Field(default=None, description='"" derives it from the HTML')


class LayoutOut(BaseModel):
    id: int
    name: str
    html_body: str
    text_body: str | None
    is_default: bool
    campaigns: int = Field(description="Campaigns that use it (a delete is refused while > 0)")
    created_at: datetime
    updated_at: datetime


def _out(row: layouts.LayoutRow) -> LayoutOut:
    return LayoutOut(**row.__dict__)


@router.get("/layouts", tags=["layouts"], response_model=list[LayoutOut])
def list_layouts(conn: Db) -> list[LayoutOut]:
    """Every layout, by name, with how many campaigns use it."""
    return [_out(r) for r in layouts.list_layouts(conn)]


@router.post("/layouts", tags=["layouts"], response_model=LayoutOut, status_code=201)
def add_layout(conn: Db, body: LayoutIn) -> LayoutOut:
    """A layout, checked now like a campaign body (422 naming the field and line)."""
    lid = layouts.add_layout(
        conn, body.name, body.html_body, body.text_body, default=body.is_default
    )
    return _out(layouts.get_layout(conn, lid))


@router.get("/layouts/{layout_id}", tags=["layouts"], response_model=LayoutOut)
def get_layout(conn: Db, layout_id: LayoutId) -> LayoutOut:
    return _out(layouts.get_layout(conn, layout_id))


@router.patch("/layouts/{layout_id}", tags=["layouts"], response_model=LayoutOut)
def edit_layout(conn: Db, layout_id: LayoutId, body: LayoutEdit) -> LayoutOut:
    """Change it (409 while a broadcast that uses it is under way)."""
    return _out(
        layouts.edit_layout(
            conn, layout_id, name=body.name, html_body=body.html_body, text_body=body.text_body
        )
    )


@router.put("/layouts/{layout_id}/default", tags=["layouts"], response_model=LayoutOut)
def make_default(conn: Db, layout_id: LayoutId) -> LayoutOut:
    """Campaigns created without naming a layout get this one."""
    row = layouts.set_default(conn, layout_id)
    assert row is not None
    return _out(row)


@router.delete("/layouts/{layout_id}", tags=["layouts"], status_code=204)
def delete_layout(conn: Db, layout_id: LayoutId) -> Response:
    """Delete it; 409 while any campaign uses it."""
    layouts.delete_layout(conn, layout_id)
    return Response(status_code=204)
