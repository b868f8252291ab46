"""Issue 41: a provider's delivery event confirms a job a crash left unconfirmed, unattended.

Real `senddock serve`, real Postgres, events signed as the providers sign them (the keys and
helpers of tests/test_bounce_webhooks.py). The unconfirmed jobs are real: the catcher keeps
each `lost-*` message and hangs up before its 250 (RFC 1047), so the worker cannot know.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import httpx

from senddock.campaigns import status
from senddock.testing import Catcher
from support import Conn, ThreadWorker, jobs, send_campaign, wait_until
from test_bounce_webhooks import Sns, mailgun, sendgrid
from test_bounce_webhooks import hooks as hooks  # the fixtures
from test_bounce_webhooks import hooks_server as hooks_server
from test_bounce_webhooks import sns as sns
from test_unconfirmed import HOLD, _lose_reply

LOST = ("lost-ses@example.com", "lost-mg@example.com", "lost-sg@example.com")
FINE = "fine@example.com"


def ses_event(kind: str, message_id: str) -> dict[str, Any]:
    """An SES event (event publishing through SNS) with the original headers included."""
    ses = {
        "eventType": kind,
        "mail": {
            "timestamp": "2026-12-07T14:00:00.000Z",
            "source": "news@example.org",
            "messageId": "010f0190-ses-own-id",
            "destination": ["lost-ses@example.com"],
            "headersTruncated": False,
            "headers": [{"name": "Message-ID", "value": message_id}],
            "commonHeaders": {"messageId": message_id, "subject": "News"},
        },
        "send": {},
    }
    digest = hashlib.sha256(message_id.encode()).hexdigest()[:12]
    return {
        "Type": "Notification",
        "MessageId": f"5b7f0a10-{kind.lower()}-{digest}",
        "Message": json.dumps(ses),
        "Timestamp": "2026-12-07T14:00:01.000Z",
    }


def _unconfirmed(conn: Conn, db_url: str) -> tuple[int, int, dict[str, dict[str, Any]]]:
    with Catcher(fault_for=_lose_reply) as catcher:
        cid, bid = send_campaign(conn, "news", [*LOST, FINE])
        with ThreadWorker(db_url, catcher.url, concurrency=1, retry_schedule=HOLD):
            done = {"sent", "unconfirmed"}

            def settled() -> bool:
                rows = jobs(conn, bid).values()
                return {r["status"] for r in rows} <= done and len(rows) == 4

            assert wait_until(settled, 30)
        assert catcher.count_by_rcpt() == {**{e: 1 for e in LOST}, FINE: 1}
    return cid, bid, jobs(conn, bid)


def test_delivery_events_confirm_the_unconfirmed_jobs_they_name_and_nothing_else(
    conn: Conn, db_url: str, hooks: httpx.Client, sns: Sns
) -> None:
    """SES Send, Mailgun delivered and SendGrid delivered events, each naming one
    unconfirmed job by its Message-ID, make it sent at once, recorded as `<provider>-event`;
    the campaign is then sent with nobody asked. An event with a forged token, or naming a
    job already sent, changes nothing. (Fails without the intake's confirm: all three stay
    unconfirmed and the campaign waits for a person.)"""
    cid, bid, rows = _unconfirmed(conn, db_url)
    assert {e for e, r in rows.items() if r["status"] == "unconfirmed"} == set(LOST)
    ses_id, mg_id, sg_id = (rows[e]["message_id"] for e in LOST)

    forged = ses_id[:-20] + ("0" if ses_id[-20] != "0" else "1") + ses_id[-19:]
    assert hooks.post("/webhooks/ses", content=sns.sign(ses_event("Send", forged))).is_success
    fine_id = rows[FINE]["message_id"]
    assert hooks.post("/webhooks/ses", content=sns.sign(ses_event("Delivery", fine_id))).is_success
    assert {e for e, r in jobs(conn, bid).items() if r["status"] == "unconfirmed"} == set(LOST)
    assert jobs(conn, bid)[FINE]["settled_by"] is None

    answer = hooks.post("/webhooks/ses", content=sns.sign(ses_event("Send", ses_id)))
    assert answer.status_code == 200, answer.text
    delivered = {
        "event": "delivered",
        "recipient": LOST[1],
        "message": {"headers": {"message-id": mg_id.strip("<>")}},
    }
    assert hooks.post("/webhooks/mailgun", content=mailgun(delivered)).status_code == 200
    body, headers = sendgrid([{"email": LOST[2], "event": "delivered", "smtp-id": sg_id}])
    assert hooks.post("/webhooks/sendgrid", content=body, headers=headers).status_code == 200

    rows = jobs(conn, bid)
    for email, by in zip(LOST, ("ses-event", "mailgun-event", "sendgrid-event"), strict=True):
        assert (rows[email]["status"], rows[email]["settled_by"]) == ("sent", by)
        assert rows[email]["settled_at"] is not None
    st = status(conn, cid)
    assert (st.status, st.counts.sent, st.counts.unconfirmed) == ("sent", 4, 0)
