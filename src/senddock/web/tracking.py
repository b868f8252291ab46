"""The two public routes of tracked messages (issue 37):

GET|HEAD /r/TOKEN  a click: 302 to the link's URL, read from tracked_links by the id the
                   token names (never from the request); cached per process after the first.
GET|HEAD /o/TOKEN  an open: a 1x1 transparent GIF, never cached (Cache-Control: no-store).
GET|HEAD /t/TOKEN  the hidden trap link (messages/tracking.py): an empty page; the event is
                   a machine's, and marks that job's clicks near it (tracking/events.py).

TOKEN is signed (messages/tracking.py): a forged, cut or unknown one gets 404 and records
nothing. The answer goes at once; the event joins the batch `serve` writes every 100 ms
(tracking/events.py), so a click keeps working while Postgres is briefly away (a link this
process has not seen yet needs Postgres once: 503 until then).

Limits, in this process (a count in Postgres per request, as the sign-in limit keeps, would
stop the redirect whenever Postgres stops): a client (IP, an IPv6 one by its /64) that sent
FAILURES bad tokens in a window of WINDOW seconds gets 429 on these routes until the window
ends; past EVENTS events in a window its events are recorded as made by a machine, with that
as the reason, and past 10 x EVENTS not recorded at all (the answer still goes).

Human or machine (item 3 of the issue): what one request shows is judged here, in memory,
as it is answered (`judge`): a HEAD request (no browser sends one for a link or an image), a
known proxy's or scanner's User-Agent or address (tracking/proxies.py), more than EVENTS
requests a window from one address. The address is the connection's, or X-Forwarded-For's
when `serve` trusts its proxy (SENDDOCK_PROXIES). What needs other rows (prefetch after
delivery, a burst over every link, the trap) is judged where the batch is written
(tracking/events.py), never on this path. Every event keeps why; none is dropped for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

import psycopg
import psycopg_pool
from psycopg.rows import DictRow
from psycopg_pool import ConnectionPool
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from senddock.messages import verify
from senddock.messages.tracking import CLICK, OPEN, TRAP
from senddock.tracking import Event, EventWriter, Targets
from senddock.tracking.events import Kind
from senddock.tracking.proxies import known_machine
from senddock.web.login_limits import client_key
from senddock.web.pages import page

Pool = ConnectionPool[psycopg.Connection[DictRow]]

WINDOW = 60.0
FAILURES = 20
EVENTS = 300
MAX_CLIENTS = 100_000  # clients remembered; past it the oldest windows are forgotten

# The smallest transparent GIF (43 bytes).
PIXEL = (
    b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00"
    b",\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"
)
NO_STORE = {"Cache-Control": "no-store, private", "Pragma": "no-cache"}
NOT_VALID = (
    "<p>This link is not valid: it may have been cut or changed. "
    "Use the link from the message itself.</p>"
)


class Limits:
    """Per client and per window: bad tokens and events (see the module). Used on the event
    loop's thread only."""

    def __init__(self, window: float = WINDOW) -> None:
        self.window = window
        self._seen: dict[str, list[float | int]] = {}  # client: [window start, failures, events]

    def _entry(self, client: str) -> list[float | int]:
        now = time.monotonic()
        entry = self._seen.get(client)
        if entry is None or now - entry[0] >= self.window:
            if len(self._seen) >= MAX_CLIENTS:
                self._seen.clear()
            entry = self._seen[client] = [now, 0, 0]
        return entry

    def refused(self, client: str) -> bool:
        return self._entry(client)[1] >= FAILURES

    def failed(self, client: str) -> None:
        self._entry(client)[1] += 1

    def event(self, client: str) -> int:
        """Count one event; how many this client has made in its window."""
        entry = self._entry(client)
        entry[2] += 1
        return int(entry[2])


def judge(
    method: str, events: int, user_agent: str = "", host: str | None = None
) -> tuple[bool, str | None]:
    """(machine, why) of one request, by the evidence it carries itself (see the module)."""
    if method == "HEAD":
        return True, "HEAD request"
    known = known_machine(user_agent, host)
    if known is not None:
        return True, known
    if events > EVENTS:
        return True, f"more than {EVENTS} requests in {WINDOW:g} s from one address"
    return False, None


class TrackingRoutes:
    """GET|HEAD /r/TOKEN and /o/TOKEN, on the app's pool, link key and event writer."""

    def __init__(self, pool: Pool, key: Callable[[], bytes], writer: EventWriter) -> None:
        self.pool = pool
        self.key = key
        self.writer = writer
        self.targets = Targets()
        self.limits = Limits()

    def _read(self, broadcast_id: int, link_id: int) -> str | None:
        with self.pool.connection(timeout=5) as conn:
            return self.targets.read(conn, broadcast_id, link_id)

    def _record(
        self,
        request: Request,
        client: str,
        kind: Kind,
        who: tuple[int | None, int],
        link: int | None,
    ) -> None:
        events = self.limits.event(client)
        if events > 10 * EVENTS:
            return
        agent = request.headers.get("user-agent", "")
        host = request.client.host if request.client else None
        machine, why = judge(request.method, events, agent, host)
        if kind == "trap":
            machine, why = True, "followed the hidden trap link"
        self.writer.add(
            Event(
                kind=kind,
                broadcast_id=who[1],
                subscriber_id=who[0],
                link_id=link,
                at=datetime.now(UTC),
                user_agent=agent,
                machine=machine,
                why=why,
            )
        )

    def _refusal(self, client: str) -> Response:
        self.limits.failed(client)
        return page("Link not valid", NOT_VALID, 404)

    async def click(self, request: Request) -> Response:
        client = client_key(request.client.host if request.client else None)
        if self.limits.refused(client):
            return page("Too many requests", "<p>Wait a minute, then try again.</p>", 429)
        ids = verify(self.key(), CLICK, str(request.path_params["token"]))
        if ids is None or len(ids) not in (2, 3):
            return self._refusal(client)
        subscriber = ids[0] if len(ids) == 3 else None  # two: an anonymous campaign's
        broadcast, link = ids[-2], ids[-1]
        url = self.targets.cached(broadcast, link)
        if url is None:
            try:
                url = await run_in_threadpool(self._read, broadcast, link)
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout):
                return page("Try again", "<p>This link cannot be followed right now.</p>", 503)
            if url is None:
                return self._refusal(client)
        self._record(request, client, "click", (subscriber, broadcast), link)
        return RedirectResponse(url, 302, headers=NO_STORE)

    async def open(self, request: Request) -> Response:
        client = client_key(request.client.host if request.client else None)
        if self.limits.refused(client):
            return Response(status_code=429)
        ids = verify(self.key(), OPEN, str(request.path_params["token"]))
        if ids is None or len(ids) not in (1, 2):
            self.limits.failed(client)
            return Response(status_code=404)
        subscriber = ids[0] if len(ids) == 2 else None  # one: an anonymous campaign's
        self._record(request, client, "open", (subscriber, ids[-1]), None)
        return Response(PIXEL, media_type="image/gif", headers=NO_STORE)

    async def trap(self, request: Request) -> Response:
        client = client_key(request.client.host if request.client else None)
        if self.limits.refused(client):
            return Response(status_code=429)
        ids = verify(self.key(), TRAP, str(request.path_params["token"]))
        if ids is None or len(ids) not in (1, 2):
            self.limits.failed(client)
            return Response(status_code=404)
        subscriber = ids[0] if len(ids) == 2 else None
        self._record(request, client, "trap", (subscriber, ids[-1]), None)
        return Response(
            "", media_type="text/plain", headers={**NO_STORE, "X-Robots-Tag": "noindex"}
        )
