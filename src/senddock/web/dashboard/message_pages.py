"""The message itself, on its campaign's page (issue 39, item 4): rendered, and its raw source.

Built as a test send builds it (campaigns/trial.py): for an address that is nobody's, dressed
in the name and attributes of the first subscriber the campaign would go to now, without any
subscriber's unsubscribe or preference link. The rendered part is answered into the page's
`<iframe sandbox>` under the preview's own policy (layout_pages.PREVIEW_HEADERS: no script,
nothing fetched), the source as plain text.
"""

from __future__ import annotations

import email
import email.policy
from email.message import EmailMessage

from fastapi import APIRouter
from markupsafe import escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from senddock.campaigns import trial
from senddock.errors import NotFound
from senddock.web.dashboard.gate import LoggedIn
from senddock.web.dashboard.layout_pages import PREVIEW_HEADERS
from senddock.web.dashboard.views import db, not_found

router = APIRouter(include_in_schema=False, route_class=LoggedIn)

# Whom the shown message is addressed to: an example address, nobody's (no links signed).
SHOWN_TO = "recipient@example.com"
SOURCE_HEADERS = {
    "Content-Type": "text/plain; charset=utf-8",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def _built(request: Request, campaign_id: int) -> bytes | None:
    """The campaign's message as its audience's first subscriber would get it; None if there
    is no such campaign."""
    with db(request) as conn:
        try:
            [one] = trial.build(conn, campaign_id, [SHOWN_TO], request.app.state.settings)
        except NotFound:
            return None
    return one.data


@router.get("/campaigns/{campaign_id}/message")
def message_view(request: Request, campaign_id: int) -> Response:
    """The message's HTML part (its text part where it has none), for the page's frame."""
    data = _built(request, campaign_id)
    if data is None:
        return not_found(request, f"There is no campaign {campaign_id}.")
    msg = email.message_from_bytes(data, policy=email.policy.default)
    assert isinstance(msg, EmailMessage)
    html = msg.get_body(("html",))
    if html is not None:
        return HTMLResponse(str(html.get_content()), headers=PREVIEW_HEADERS)
    text = msg.get_body(("plain",))
    shown = str(text.get_content()) if text is not None else ""
    return HTMLResponse(f"<pre>{escape(shown)}</pre>", headers=PREVIEW_HEADERS)


@router.get("/campaigns/{campaign_id}/message.eml")
def message_source(request: Request, campaign_id: int) -> Response:
    """The message's raw source, as it would go to the relay."""
    data = _built(request, campaign_id)
    if data is None:
        return not_found(request, f"There is no campaign {campaign_id}.")
    return Response(data, headers=SOURCE_HEADERS)
