"""What every request passes before the app reads its body: who sends it and how big it may be.

An unauthenticated 100 MB JSON to /api/v1/campaigns took the server from 75 to 279 MB RSS
before its 401, and multipart bodies to /login and /api/v1/imports were spooled to disk in
full first (issue 19.4). So, in front of the app (inside the session middleware, which only
decodes the cookie):

- a request to /api/ that may change something is authenticated first, from its headers and
  session cookie only (auth.check_request); a 401 or 403 goes out before a byte of the body
  is read;
- every body has a cap, by who sends it: PUBLIC_BODY without a credential (/login,
  /unsubscribe, /confirm), SIGNED_IN_BODY with one, SENDDOCK_MAX_IMPORT_MB for the two CSV
  uploads, WEBHOOK_BODY on /webhooks/ (providers sign; they hold no session). A
  Content-Length over the cap gets 413 at once; a body without one is counted as it arrives,
  and at the first byte over the app is told the client left and the answer is a 413 (JSON
  on /api/ and /webhooks/, a page elsewhere).
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from senddock.web import auth
from senddock.web.dashboard.views import render
from senddock.web.errors import body as error_body

PUBLIC_BODY = 64 * 1024  # a login form or a one-click unsubscribe is a few hundred bytes
# A campaign may carry text and HTML of up to 1,000,000 characters each (schemas.Body):
# as UTF-8 and escaped in JSON or a form that is a few MB.
SIGNED_IN_BODY = 8 * 1024 * 1024
# A provider's webhook event (web/webhooks.py): SNS messages are at most 256 KB, SendGrid
# batches a few hundred events; no session is asked for, so this cap holds for every caller.
WEBHOOK_BODY = 1024 * 1024
WEBHOOKS = "/webhooks/"
IMPORT_PATHS = frozenset({"/api/v1/imports", "/lists/import"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _size(amount: int) -> str:
    mib = 1024 * 1024
    return f"{amount // mib} MB" if amount >= mib else f"{amount // 1024} KiB"


def too_large(scope: Scope, cap: int) -> Response:
    """The 413 answer: the API's error shape on /api/, a dashboard page elsewhere."""
    path = str(scope["path"])
    upload = path in IMPORT_PATHS
    message = (
        f"the file is larger than {_size(cap)}"
        if upload
        else f"the request body is larger than {_size(cap)}"
    )
    if path.startswith(("/api/", WEBHOOKS)):
        return error_body(413, message, "file" if upload else "body")
    return render(Request(scope), "error.html", 413, title="Too large", message=message + ".")


class BodyGuard:
    """Authenticate /api/ changes before their body, and cap every body (see the module)."""

    def __init__(self, app: ASGIApp, import_cap: int) -> None:
        self.app = app
        self.import_cap = import_cap

    async def _refusal(self, request: Request) -> Response | None:
        """None when the request carries a valid credential; else the 401 or 403 answer."""
        try:
            await run_in_threadpool(auth.check_request, request)
        except auth.NotAuthenticated as exc:
            return auth.unauthorized(exc.message)
        except auth.CsrfFailed:
            return auth.csrf_refused()
        return None

    def _cap(self, path: str, signed_in: bool) -> int:
        if path.startswith(WEBHOOKS):
            return WEBHOOK_BODY
        if not signed_in:
            return PUBLIC_BODY
        return self.import_cap if path in IMPORT_PATHS else SIGNED_IN_BODY

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        path = str(scope["path"])
        signed_in = auth.session_admin(request) is not None
        if path.startswith("/api/") and scope["method"] not in SAFE_METHODS:
            refused = await self._refusal(request)
            if refused is not None:
                await refused(scope, receive, send)
                return
            signed_in = True
        cap = self._cap(path, signed_in)
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > cap:
            await too_large(scope, cap)(scope, receive, send)
            return

        received = 0
        over = False
        started = False

        async def counted() -> Message:
            nonlocal received, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > cap:
                    over = True  # the app sees a client that left; we answer for it
                    return {"type": "http.disconnect"}
            return message

        async def answer(message: Message) -> None:
            nonlocal started
            if over and not started:
                return  # the app's answer to a body cut short: replaced by the 413
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, answer)
        except Exception:
            if not over:
                raise
        if over and not started:
            await too_large(scope, cap)(scope, receive, send)
