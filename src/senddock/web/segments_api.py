"""The segments API under /api/v1: saved filters, and how many a filter or a campaign reaches.

GET    /segments                   every saved segment, with its count now
POST   /segments                   {"name", "filter"}: 201, or 422 with the column
GET    /segments/{id}              one, with its count
DELETE /segments/{id}              409 while a campaign names it
GET    /segments/count?filter=&list=   how many a filter reaches (the dashboard form asks)
GET    /campaigns/{id}/audience    how many a campaign would reach if sent now
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi import Path as PathParam
from pydantic import BaseModel, Field

from senddock.audience import lists as lists_api
from senddock.audience import segments
from senddock.audience.segment_filter import MAX_LENGTH
from senddock.campaigns.audience import audience, preview_count
from senddock.web import auth
from senddock.web import schemas as s
from senddock.web.api import CampaignId, Db
from senddock.web.errors import RESPONSES

router = APIRouter(
    prefix="/api/v1",
    dependencies=[Depends(auth.require_api_auth)],
    responses=RESPONSES,
    tags=["segments"],
)


class SegmentIn(s.Strict):
    name: s.Name
    filter: s.Body = Field(description='e.g. attributes.city = "London" (parsed: at most 2,000)')


class SegmentOut(BaseModel):
    id: int
    name: str
    filter: str
    count: int = Field(description="Active, unsuppressed subscribers it matches now")


class Count(BaseModel):
    count: int
    filter: str | None = None
    segment: str | None = None


class Deleted(BaseModel):
    deleted: int


def _out(conn: Db, g: segments.Segment) -> SegmentOut:
    return SegmentOut(id=g.id, name=g.name, filter=g.filter, count=segments.count(conn, g.filter))


@router.get("/segments", response_model=list[SegmentOut])
def list_segments(conn: Db) -> list[SegmentOut]:
    """Every saved segment, by name, with how many it matches now."""
    return [_out(conn, g) for g in segments.all_segments(conn)]


@router.post("/segments", response_model=SegmentOut, status_code=201)
def add_segment(conn: Db, body: SegmentIn) -> SegmentOut:
    """Save a filter by name (422 with the column if it does not parse; 409: name taken)."""
    return _out(conn, segments.add(conn, body.name, body.filter))


@router.get("/segments/count", response_model=Count)
def count_filter(
    conn: Db,
    filter: Annotated[str | None, Query(max_length=MAX_LENGTH, pattern=r"^[^\x00]*$")] = None,
    lists: Annotated[list[s.Name] | None, Query(alias="list", max_length=100)] = None,
) -> Count:
    """How many active, unsuppressed subscribers (confirmed on any `list`, if given) match
    `filter` (everyone without one)."""
    ids = [lists_api.find_list(conn, n) for n in lists] if lists else None
    text = filter.strip() if filter and filter.strip() else None
    return Count(count=segments.count(conn, text, ids), filter=text)


SegmentId = Annotated[int, PathParam(ge=1, le=s.BIGINT)]


@router.get("/segments/{segment_id}", response_model=SegmentOut)
def get_segment(conn: Db, segment_id: SegmentId) -> SegmentOut:
    return _out(conn, segments.by_id(conn, segment_id))


@router.delete("/segments/{segment_id}", response_model=Deleted)
def delete_segment(conn: Db, segment_id: SegmentId) -> Deleted:
    """Delete a segment no campaign names (409 otherwise)."""
    segments.delete(conn, segments.by_id(conn, segment_id).name)
    return Deleted(deleted=segment_id)


@router.get("/campaigns/{campaign_id}/audience", response_model=Count, tags=["campaigns"])
def campaign_audience(conn: Db, campaign_id: CampaignId) -> Count:
    """How many would receive the campaign if it were sent now (its lists, narrowed)."""
    who = audience(conn, campaign_id)
    return Count(count=preview_count(conn, campaign_id), filter=who.filter, segment=who.segment)
