"""Issue 41: reconcile asks Mailgun, Postmark and SendGrid's search APIs (over real HTTP).

A local HTTP server answers as each provider documents (the answers below are built from the
documented examples, each cited), and records what it was asked: the key in the documented
header, our Message-ID or the recipient in the documented parameter. The unconfirmed jobs are
real (the catcher keeps each `lost-*` message and hangs up before its 250).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit
from zoneinfo import ZoneInfo

import pytest

from senddock.campaigns import status
from senddock.testing import Catcher
from support import Conn, ThreadWorker, jobs, send_campaign, senddock, wait_until, worker_env
from test_unconfirmed import HOLD, _lose_reply

MAILGUN = "lost-mailgun@example.com"
POSTMARK = "lost-postmark@example.com"
SENDGRID = "lost-sendgrid@example.com"
REJECTED = "lost-rejected@example.com"
NOBODY = "lost-nobody@example.com"
LOST = (MAILGUN, POSTMARK, SENDGRID, REJECTED, NOBODY)
SENDER = "news@example.org"


class Providers:
    """The three APIs on one local server; `said` maps an address to what each knows."""

    def __init__(self) -> None:
        self.message_ids: dict[str, str] = {}
        self.dots: dict[str, datetime] = {}
        self.asked: list[tuple[str, dict[str, list[str]], dict[str, str]]] = []
        providers = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = parse_qs(parts.query)
                providers.asked.append((parts.path, query, dict(self.headers)))
                body = json.dumps(providers.answer(parts.path, query)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def answer(self, path: str, query: dict[str, list[str]]) -> Any:
        if path == "/v3/news.example.org/events":
            return self.mailgun(query["message-id"][0])
        if path == "/messages/outbound":
            return self.postmark(query["recipient"][0])
        if path == "/v3/messages":
            return self.sendgrid(query["query"][0])
        return {"message": "not found"}

    def mailgun(self, message_id: str) -> Any:
        # GET /v3/{domain}/events answers {"items": [...], "paging": {...}}; an event as in
        # documentation.mailgun.com/docs/mailgun/user-manual/webhooks/webhook-payloads
        # ("Accepted Event": event, id, timestamp, recipient, message.headers.message-id).
        items = []
        for email, kind in ((MAILGUN, "accepted"), (REJECTED, "rejected")):
            if self.message_ids[email].strip("<>") == message_id:
                items.append(
                    {
                        "event": kind,
                        "id": "CCXMjJ7nQi2N3BPigGOdgQ",
                        "timestamp": self.dots[email].timestamp(),
                        "log-level": "info" if kind == "accepted" else "warn",
                        "recipient": email,
                        "envelope": {"sender": SENDER, "targets": email, "transport": "smtp"},
                        "message": {
                            "headers": {
                                "from": f"News <{SENDER}>",
                                "message-id": message_id,
                                "subject": "Hello",
                                "to": email,
                            },
                            "size": 341,
                        },
                    }
                )
        base = f"{self.url}/v3/news.example.org/events"
        paging = {k: f"{base}/W3siYSI6IGZhbHNlfV0=" for k in ("first", "last", "next", "previous")}
        return {"items": items, "paging": paging}

    def postmark(self, recipient: str) -> Any:
        # GET /messages/outbound answers {"TotalCount": n, "Messages": [...]} with MessageID,
        # Recipients, ReceivedAt, From, Subject, Status, Metadata, MessageStream
        # (postmarkapp.com/developer/api/messages-api, "Outbound message search").
        if recipient != POSTMARK:
            return {"TotalCount": 0, "Messages": []}
        at = self.dots[POSTMARK].astimezone(ZoneInfo("America/New_York")).isoformat()
        message = {
            "Tag": "",
            "MessageID": "0ac29aee-e1cd-480d-b08d-4f48548ff48d",
            "To": [{"Email": POSTMARK, "Name": None}],
            "Cc": [],
            "Bcc": [],
            "Recipients": [POSTMARK],
            "ReceivedAt": at,
            "From": f'"News" <{SENDER}>',
            "Subject": "Hello",
            "Attachments": [],
            "Status": "Sent",
            "TrackOpens": False,
            "TrackLinks": "None",
            "Metadata": {},
            "MessageStream": "outbound",
            "Sandboxed": False,
        }
        return {"TotalCount": 1, "Messages": [message]}

    def sendgrid(self, query: str) -> Any:
        # GET /v3/messages answers {"messages": [{from_email, msg_id, subject, to_email,
        # status, opens_count, clicks_count, last_event_time}]} (twilio.com/docs/sendgrid/
        # api-reference/email-activity/filter-all-messages).
        if f'to_email="{SENDGRID}"' not in query:
            return {"messages": []}
        at = self.dots[SENDGRID].astimezone(ZoneInfo("UTC")).strftime("%Y-%m-%dT%H:%M:%SZ")
        message = {
            "from_email": SENDER,
            "msg_id": "abc123.filter0001p3las1-27142-5D6A7E9F-2.0",
            "subject": "Hello",
            "to_email": SENDGRID,
            "status": "delivered",
            "opens_count": 0,
            "clicks_count": 0,
            "last_event_time": at,
        }
        return {"messages": [message]}


@pytest.fixture
def providers() -> Iterator[Providers]:
    server = Providers()
    yield server
    server.http.shutdown()


def test_reconcile_asks_each_providers_search_and_leaves_what_none_saw(
    conn: Conn, db_url: str, providers: Providers
) -> None:
    """Mailgun (by our Message-ID), Postmark and SendGrid (by recipient, sender and the job's
    window) each saw one job accepted: confirmed, recorded as that provider. Mailgun's
    `rejected` event proves the relay never took one: queued again. The one no provider saw
    stays unconfirmed, with each provider's `not seen` kept for the dashboard. (Fails
    without the provider searches: nothing is settled.)"""
    with Catcher(fault_for=_lose_reply) as catcher:
        cid, bid = send_campaign(conn, "news", [*LOST, "fine@example.com"])
        with ThreadWorker(db_url, catcher.url, concurrency=1, retry_schedule=HOLD):
            assert wait_until(lambda: status(conn, cid).counts.unconfirmed == len(LOST), 30)
    rows = jobs(conn, bid)
    for email in LOST:
        providers.message_ids[email] = rows[email]["message_id"]
        providers.dots[email] = rows[email]["dot_at"]
    env = worker_env(
        db_url,
        catcher.url,
        SENDDOCK_MAILGUN_API_KEY="key-mailgun-secret",
        SENDDOCK_MAILGUN_DOMAIN="news.example.org",
        SENDDOCK_MAILGUN_API_URL=providers.url,
        SENDDOCK_POSTMARK_SERVER_TOKEN="postmark-server-token",
        SENDDOCK_POSTMARK_API_URL=providers.url,
        SENDDOCK_SENDGRID_API_KEY="SG.sendgrid-key",
        SENDDOCK_SENDGRID_API_URL=providers.url,
    )
    out = senddock(env, "campaign", "reconcile", str(cid))
    assert out.returncode == 0, out.stderr
    assert "confirmed 3 sent, queued 1 again, 1 left for a person" in out.stdout
    assert "secret" not in out.stdout + out.stderr and "token" not in out.stdout

    rows = jobs(conn, bid)
    settled = {e: (rows[e]["status"], rows[e]["settled_by"]) for e in LOST}
    assert settled == {
        MAILGUN: ("sent", "mailgun"),
        POSTMARK: ("sent", "postmark"),
        SENDGRID: ("sent", "sendgrid"),
        REJECTED: ("pending", "mailgun"),
        NOBODY: ("unconfirmed", None),
    }
    notes = conn.execute(
        "SELECT job_id, source, said FROM reconcile_notes ORDER BY source"
    ).fetchall()
    assert [(n["source"], n["said"]) for n in notes] == [
        ("mailgun", "not seen"),
        ("postmark", "not seen"),
        ("sendgrid", "not seen"),
    ]
    assert {n["job_id"] for n in notes} == {rows[NOBODY]["id"]}

    # What each API was asked, with its documented credentials.
    mailgun = [(q, h) for p, q, h in providers.asked if p.startswith("/v3/news")]
    assert {q["message-id"][0] for q, _ in mailgun} == {
        providers.message_ids[e].strip("<>") for e in LOST
    }
    assert all(h["Authorization"].startswith("Basic ") for _, h in mailgun)
    postmark = [(q, h) for p, q, h in providers.asked if p == "/messages/outbound"]
    assert all(h["X-Postmark-Server-Token"] == "postmark-server-token" for _, h in postmark)
    assert all(q["fromemail"] == [SENDER] for q, _ in postmark)
    sendgrid = [h for p, _, h in providers.asked if p == "/v3/messages"]
    assert all(h["Authorization"] == "Bearer SG.sendgrid-key" for h in sendgrid)

    # A provider's base URL must be https (or http to this machine): one line, non-zero.
    bad = {**env, "SENDDOCK_MAILGUN_API_URL": "http://api.mailgun.example"}
    refused = senddock(bad, "campaign", "reconcile", str(cid))
    assert refused.returncode != 0 and "SENDDOCK_MAILGUN_API_URL" in refused.stderr
