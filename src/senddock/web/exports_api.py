"""CSV downloads under /api/v1, each safe to open in a spreadsheet (audience/cells.py):

GET /exports/subscribers.csv?list=&segment=&filter=   everyone, a list's members, a segment
GET /campaigns/{id}/recipients.csv?status=            a campaign's recipients with outcomes

Each is written and streamed by web/downloads.py (flat memory, no connection held while a
slow client reads).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse

from senddock.audience import segments
from senddock.audience.export import export_subscribers
from senddock.audience.segment_filter import MAX_LENGTH
from senddock.campaigns.campaigns import JobStatus
from senddock.campaigns.recipients import write_csv
from senddock.errors import Invalid
from senddock.web import auth
from senddock.web.api import CampaignId, Db
from senddock.web.downloads import CSV, csv_download
from senddock.web.errors import RESPONSES

router = APIRouter(
    prefix="/api/v1",
    dependencies=[Depends(auth.require_api_auth)],
    responses=RESPONSES,
)

NameParam = Annotated[str | None, Query(max_length=200, pattern=r"^[^\x00]*$")]


@router.get(
    "/exports/subscribers.csv",
    tags=["subscribers"],
    response_class=StreamingResponse,
    responses=CSV,
)
def export_subscribers_csv(
    conn: Db,
    list_name: Annotated[NameParam, Query(alias="list")] = None,
    segment: NameParam = None,
    filter_text: Annotated[
        str | None, Query(alias="filter", max_length=MAX_LENGTH, pattern=r"^[^\x00]*$")
    ] = None,
) -> StreamingResponse:
    """Subscribers as CSV (email,name,status,attributes,suppressed; it imports back as it
    is): everyone, or `list`'s members, narrowed by a saved `segment` or a `filter`."""
    if segment is not None and filter_text is not None:
        raise Invalid("give segment or filter, not both", field="filter")
    if segment is not None:
        filter_text = segments.find(conn, segment).filter
    return csv_download(
        lambda out: export_subscribers(conn, out, list_name, filter_text), "subscribers.csv"
    )


@router.get(
    "/campaigns/{campaign_id}/recipients.csv",
    tags=["campaigns"],
    response_class=StreamingResponse,
    responses=CSV,
)
def campaign_recipients_csv(
    conn: Db, campaign_id: CampaignId, status: Annotated[JobStatus | None, Query()] = None
) -> StreamingResponse:
    """Every recipient of a campaign with its outcome (status, failure, attempts, sent time,
    Message-ID, last reply) as CSV, optionally of one status or failure."""
    return csv_download(
        lambda out: write_csv(conn, campaign_id, status, out), f"campaign-{campaign_id}.csv"
    )
