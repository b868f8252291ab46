"""The dashboard: server-rendered pages, live numbers over Server-Sent Events, no JS build.

`router` is what create_app includes; every route but /login needs a dashboard session.
"""

from fastapi import APIRouter

from senddock.web.dashboard import (
    audience_ops,
    audience_pages,
    campaign_edit,
    campaign_pages,
    layout_pages,
    list_pages,
    live,
    login,
    message_pages,
    privacy_pages,
    settings_page,
    subscriber_bulk,
    subscriber_pages,
    unconfirmed_page,
    workers_page,
)

router = APIRouter(include_in_schema=False)
for part in (
    login.public,
    login.private,
    layout_pages.router,
    campaign_pages.router,
    campaign_edit.router,
    message_pages.router,
    unconfirmed_page.router,
    subscriber_bulk.router,
    subscriber_pages.router,
    privacy_pages.router,
    audience_ops.router,
    list_pages.router,
    audience_pages.router,
    live.router,
    workers_page.router,
    settings_page.router,
):
    router.include_router(part)

__all__ = ["router"]
