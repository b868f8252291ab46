"""Hosted relays as witnesses: ask a provider's API whether it took an unconfirmed job.

Issue 41. Each source is optional and on when its settings are (config.py, SENDDOCK_…):

| provider | request (documented at)                                      | matched by           |
|----------|--------------------------------------------------------------|----------------------|
| Mailgun  | GET /v3/{domain}/events?message-id=ID (documentation.mailgun | our Message-ID: the  |
|          | .com/docs/mailgun/api-reference/send/mailgun/events/get-v3-  | event's message.     |
|          | domain_name-events; events as in …/user-manual/webhooks/     | headers.message-id   |
|          | webhook-payloads)                                            |                      |
| Postmark | GET /messages/outbound?recipient=…&fromdate=…&todate=…       | recipient, sender    |
|          | (postmarkapp.com/developer/api/messages-api)                 | and the job's window |
| SendGrid | GET /v3/messages?query=to_email="…" (twilio.com/docs/        | recipient, sender    |
|          | sendgrid/api-reference/email-activity/filter-all-messages)   | and the job's window |

Postmark's and SendGrid's searches cannot take our Message-ID (they index their own ids), so
a message from our sender to the recipient within the job's window (its claim less `slack`
to its dot plus `slack`) is taken as the job: the one thing that could mislead it is a
second message from the same sender to the same person within those seconds (another
campaign sending at the same moment). Each word says what it matched, on every surface.

A provider's search finding nothing proves nothing (its index lags, its retention ends):
that is `not seen`, left for a person, never `not accepted`. Mailgun's `rejected` event
(it refused the message: the client had a 5xx, not a 250) is `not accepted`.

Plain urllib as web/webhooks.py's fetch (httpx is only in the dev lock): https only unless
the operator names another base URL (a private gateway, the tests' local server), a
timeout, a size cap, no redirects; a key is never logged nor put in a word.
"""

from __future__ import annotations

import base64
import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from senddock.campaigns.relay_log import Word, normal

TIMEOUT = 10.0  # seconds for one request
MAX_BYTES = 4 * 1024 * 1024

# Mailgun's events that mean it took the message (event types: documentation.mailgun.com/
# docs/mailgun/user-manual/events/event-types): `accepted` "the message has been placed in
# queue", and anything that can only follow it.
MAILGUN_TOOK = {"accepted", "delivered", "failed", "opened", "clicked", "unsubscribed"}
MAILGUN_TOOK |= {"complained"}
MAILGUN_REFUSED = {"rejected"}
# Postmark's message search reads dates in US Eastern time (messages-api: "Our API uses
# Eastern Time Zone").
POSTMARK_ZONE = ZoneInfo("America/New_York")


class SearchFailed(Exception):
    """The provider did not answer usably (network, status, not JSON): `cannot tell`."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_: Any) -> None:
        return None


def get_json(url: str, headers: Mapping[str, str]) -> Any:
    """GET a JSON document: bounded in time and size, no redirects; SearchFailed otherwise."""
    opener = urllib.request.build_opener(_NoRedirect)
    request = urllib.request.Request(url, headers={"Accept": "application/json", **headers})
    try:
        with opener.open(request, timeout=TIMEOUT) as answer:
            data = answer.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise SearchFailed(f"answered {exc.code}") from None
    except (OSError, http.client.HTTPException) as exc:
        raise SearchFailed(type(exc).__name__) from None
    if len(data) > MAX_BYTES:
        raise SearchFailed(f"answer over {MAX_BYTES} bytes")
    try:
        return json.loads(data)
    except ValueError:
        raise SearchFailed("the answer is not JSON") from None


@dataclass(frozen=True)
class Asked:
    """One unconfirmed job as a provider is asked about it."""

    email: str
    message_id: str
    claimed_at: datetime | None
    dot_at: datetime | None


def _window(job: Asked, slack: timedelta) -> tuple[datetime, datetime] | None:
    start = job.claimed_at or job.dot_at
    end = job.dot_at or job.claimed_at
    if start is None or end is None:
        return None
    return start - slack, end + slack


@dataclass(frozen=True)
class Mailgun:
    """Mailgun's events API, by our Message-ID."""

    base: str
    domain: str
    key: str
    source: str = "mailgun"

    def ask(self, job: Asked, slack: timedelta) -> Word:
        ours = normal(job.message_id)
        params = {"message-id": ours, "limit": "300", "ascending": "yes"}
        window = _window(job, slack)
        if window is not None:
            params["begin"] = str(int(window[0].timestamp()))
        domain = urllib.parse.quote(self.domain, safe="")
        url = f"{self.base.rstrip('/')}/v3/{domain}/events?{urllib.parse.urlencode(params)}"
        auth = base64.b64encode(f"api:{self.key}".encode()).decode()
        try:
            answer = get_json(url, {"Authorization": f"Basic {auth}"})
        except SearchFailed as exc:
            return Word(self.source, "cannot tell", f"Mailgun's events API: {exc}")
        items = answer.get("items") if isinstance(answer, dict) else None
        if not isinstance(items, list):
            return Word(self.source, "cannot tell", "Mailgun's answer has no `items` list")
        kinds = set()
        for event in items:
            if not isinstance(event, dict):
                continue
            headers = (event.get("message") or {}).get("headers") or {}
            if normal(str(headers.get("message-id") or "")) == ours:
                kinds.add(str(event.get("event")))
        if kinds & MAILGUN_TOOK:
            took = ", ".join(sorted(kinds & MAILGUN_TOOK))
            return Word(self.source, "accepted", f"Mailgun events for its Message-ID: {took}")
        if kinds & MAILGUN_REFUSED:
            return Word(self.source, "not accepted", "Mailgun rejected its Message-ID")
        return Word(self.source, "not seen", "no Mailgun event for its Message-ID")


@dataclass(frozen=True)
class Postmark:
    """Postmark's outbound message search, by recipient, sender and the job's window."""

    base: str
    token: str
    sender: str
    source: str = "postmark"

    def ask(self, job: Asked, slack: timedelta) -> Word:
        window = _window(job, slack)
        if window is None:
            return Word(self.source, "cannot tell", "the job has no claim or dot time")
        start, end = (t.astimezone(POSTMARK_ZONE) for t in window)
        params = {
            "recipient": job.email,
            "fromemail": self.sender,
            "count": "50",
            "offset": "0",
            "fromdate": start.strftime("%Y-%m-%dT%H:%M:%S"),
            "todate": end.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        url = f"{self.base.rstrip('/')}/messages/outbound?{urllib.parse.urlencode(params)}"
        try:
            answer = get_json(url, {"X-Postmark-Server-Token": self.token})
        except SearchFailed as exc:
            return Word(self.source, "cannot tell", f"Postmark's message search: {exc}")
        messages = answer.get("Messages") if isinstance(answer, dict) else None
        if not isinstance(messages, list):
            return Word(self.source, "cannot tell", "Postmark's answer has no `Messages` list")
        for m in messages:
            if not isinstance(m, dict):
                continue
            recipients = [str(r).lower() for r in m.get("Recipients") or []]
            at = _instant(m.get("ReceivedAt"))
            if (
                job.email.lower() in recipients
                and self.sender.lower() in str(m.get("From") or "").lower()
                and at is not None
                and window[0] <= at <= window[1]
            ):
                return Word(
                    self.source,
                    "accepted",
                    f"Postmark message {m.get('MessageID')} to the recipient at {at.isoformat()}"
                    f" ({m.get('Status')})",
                )
        return Word(self.source, "not seen", "no Postmark message to the recipient in its window")


@dataclass(frozen=True)
class SendGrid:
    """SendGrid's email activity, by recipient, sender and the job's window."""

    base: str
    key: str
    sender: str
    source: str = "sendgrid"

    def ask(self, job: Asked, slack: timedelta) -> Word:
        window = _window(job, slack)
        if window is None:
            return Word(self.source, "cannot tell", "the job has no claim or dot time")
        since = window[0].astimezone(ZoneInfo("UTC")).strftime("%Y-%m-%dT%H:%M:%SZ")
        # The query language (twilio.com/docs/sendgrid/for-developers/sending-email/
        # getting-started-email-activity-api, query reference): field="value", AND, BETWEEN.
        query = (
            f'to_email="{_quoted(job.email)}" AND from_email="{_quoted(self.sender)}"'
            f' AND last_event_time BETWEEN TIMESTAMP "{since}" AND TIMESTAMP "2999-12-31T00:00:00Z"'
        )
        params = {"limit": "10", "query": query}
        url = f"{self.base.rstrip('/')}/v3/messages?{urllib.parse.urlencode(params)}"
        try:
            answer = get_json(url, {"Authorization": f"Bearer {self.key}"})
        except SearchFailed as exc:
            return Word(self.source, "cannot tell", f"SendGrid's email activity: {exc}")
        messages = answer.get("messages") if isinstance(answer, dict) else None
        if not isinstance(messages, list):
            return Word(self.source, "cannot tell", "SendGrid's answer has no `messages` list")
        for m in messages:
            if not isinstance(m, dict):
                continue
            # Every status SendGrid shows (processed, delivered, not_delivered) follows its
            # taking the message; the last event is at or after that.
            at = _instant(m.get("last_event_time"))
            if (
                str(m.get("to_email") or "").lower() == job.email.lower()
                and str(m.get("from_email") or "").lower() == self.sender.lower()
                and at is not None
                and at >= window[0]
            ):
                return Word(
                    self.source,
                    "accepted",
                    f"SendGrid message {m.get('msg_id')} to the recipient ({m.get('status')},"
                    f" last event {at.isoformat()})",
                )
        return Word(self.source, "not seen", "no SendGrid message to the recipient since its claim")


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _instant(value: object) -> datetime | None:
    """An ISO 8601 instant with its zone, or None."""
    if not isinstance(value, str):
        return None
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else None
