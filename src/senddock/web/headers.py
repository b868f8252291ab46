"""The headers every answer carries: a Content-Security-Policy, nosniff, no framing, and
no referrer to other sites (issue 19.8).

The dashboard runs only its own files (/static/dashboard.js; no inline script, no inline
style attribute), so its policy allows 'self' and nothing else. A page with an inline block
of its own (the unsubscribe pages' style, Swagger UI's start-up script) sets its own policy
with that block's hash (`policy`); the middleware keeps a policy the response already has.
"""

from __future__ import annotations

import base64
import hashlib

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def source_hash(text: str) -> str:
    """The CSP source that allows the inline block `text` (its exact content)."""
    digest = hashlib.sha256(text.encode()).digest()
    return f"'sha256-{base64.b64encode(digest).decode()}'"


def policy(scripts: tuple[str, ...] = (), styles: tuple[str, ...] = ()) -> str:
    """The Content-Security-Policy: this site's own files, plus the given inline hashes."""
    script = " ".join(("'self'", *scripts))
    style = " ".join(("'self'", *styles))
    return (
        f"default-src 'self'; script-src {script}; style-src {style}; "
        "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    )


CSP = "Content-Security-Policy"
EVERY_ANSWER = {
    CSP: policy(),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}


class SecureHeaders:
    """Add EVERY_ANSWER's headers to each HTTP answer that does not set them itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in EVERY_ANSWER.items():
                    if name not in headers:
                        headers[name] = value
            await send(message)

        await self.app(scope, receive, with_headers)
