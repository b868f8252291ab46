"""Provider webhooks as an attacker sees them (issue 34.3), over real HTTP to `senddock serve`.

Before: three replays of one signed SNS soft bounce with changed unsigned bytes counted as
three events and suppressed the address; the certificate URL's pattern admitted any
`sns.<anything>.amazonaws.com` (an S3-style name) on any port; a signed event with a lone
surrogate in its text got a 500, so the provider would retry it forever.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from senddock.bounces import providers
from senddock.bounces.providers import Forged
from support import Conn
from test_bounce_providers import FETCHED, SES_BOUNCE, fetch, notification
from test_bounce_providers import sns as signed
from test_bounce_webhooks import (
    Sns,
    a_job,
    count,
    findings,
    mailgun,
    mailgun_failed,
    sendgrid,
    ses_bounce,
)
from test_bounce_webhooks import hooks as hooks  # the fixtures
from test_bounce_webhooks import hooks_server as hooks_server
from test_bounce_webhooks import sns as sns


def soft(message: dict[str, Any]) -> dict[str, Any]:
    ses = json.loads(message["Message"])
    ses["bounce"]["bounceType"] = "Transient"
    ses["bounce"]["bounceSubType"] = "MailboxFull"
    return {**message, "Message": json.dumps(ses)}


def test_sns_replays_with_changed_unsigned_bytes_are_one_event(
    conn: Conn, hooks: httpx.Client, sns: Sns
) -> None:
    bid, sid, ours = a_job(conn)
    body = json.loads(sns.sign(soft(ses_bounce("ada@example.com", ours))))
    # SNS signs some fields only: what else the JSON holds, and how, is anyone's to change.
    replays = [
        json.dumps(body),
        json.dumps(body, indent=2),
        json.dumps({**body, "UnsubscribeURL": "https://sns.example/x"}),
        json.dumps({**body, "Padding": "x" * 100}),
    ]
    for replay in replays:
        assert hooks.post("/webhooks/ses", content=replay).status_code == 200
    assert findings(conn) == [("ada@example.com", "soft", bid, sid, "ses")]
    assert count(conn, "bounce_messages") == 1 and count(conn, "suppressions") == 0


def test_mailgun_and_sendgrid_replays_change_nothing(conn: Conn, hooks: httpx.Client) -> None:
    bid, sid, ours = a_job(conn)
    signed = mailgun(mailgun_failed("ada@example.com", ours, severity="temporary"))
    again = json.loads(signed)
    again["event-data"]["recipient"] = "other@example.com"  # Mailgun signs its token only
    for body in (signed, json.dumps(again).encode(), signed):
        assert hooks.post("/webhooks/mailgun", content=body).status_code == 200
    event = {"email": "ada@example.com", "event": "bounce", "smtp-id": ours,
             "reason": "452 4.2.2 mailbox full", "status": "4.2.2"}  # fmt: skip
    body, headers = sendgrid([event])
    for _ in range(3):
        assert hooks.post("/webhooks/sendgrid", content=body, headers=headers).status_code == 200
    assert findings(conn) == [
        ("ada@example.com", "soft", bid, sid, "mailgun"),
        ("ada@example.com", "soft", bid, sid, "sendgrid"),
    ]
    assert count(conn, "suppressions") == 0


def test_a_signed_event_with_a_lone_surrogate_is_kept_with_the_replacement_character(
    conn: Conn, hooks: httpx.Client
) -> None:
    bid, sid, ours = a_job(conn)
    # JSON may write a lone surrogate as an escape; Python reads it as one, Postgres refuses it.
    event = {"email": "ada@example.com", "event": "bounce", "smtp-id": ours,
             "reason": "550 5.1.1 unknown \ud800 user\x00", "status": "5.1.1"}  # fmt: skip
    body, headers = sendgrid([event])
    assert b"\\ud800" in body
    answer = hooks.post("/webhooks/sendgrid", content=body, headers=headers)
    assert answer.status_code == 200, answer.text
    failed = mailgun_failed("ada@example.com", ours, reason="bounce \udc80")
    failed["delivery-status"]["message"] = "5.1.1 no such user \ud83d"
    answer = hooks.post("/webhooks/mailgun", content=mailgun(failed))
    assert answer.status_code == 200, answer.text
    rows = conn.execute("SELECT diagnostic FROM bounce_findings ORDER BY id").fetchall()
    assert [r["diagnostic"] for r in rows] == [
        "550 5.1.1 unknown \ufffd user\ufffd",
        "5.1.1 no such user \ufffd",
    ]
    assert findings(conn)[0][2:4] == (bid, sid)


@pytest.mark.parametrize(
    "url",
    [
        "https://sns.s3.amazonaws.com/cert.pem",  # anyone's bucket: <bucket>.s3.amazonaws.com
        "https://sns.my-bucket.amazonaws.com/cert.pem",
        "https://sns.eu-west-1.amazonaws.com:8443/cert.pem",
        "https://sns.eu-west-1.amazonaws.com:443@evil.example/cert.pem",
        "https://sns.eu-west-1.amazonaws.com.cn/cert.pem",
        "https://sns.eu-west-1.amazonaws.com:99999/cert.pem",
    ],
)
def test_a_certificate_url_off_amazon_s_sns_hosts_is_refused(url: str) -> None:
    FETCHED.clear()
    good = json.loads(signed(notification(SES_BOUNCE)))
    with pytest.raises(Forged, match="not an SNS certificate host"):
        providers.verify_sns(json.dumps({**good, "SigningCertURL": url}).encode(), fetch)
    assert FETCHED == []


@pytest.mark.parametrize(
    "url",
    [
        "https://sns.eu-west-1.amazonaws.com/cert.pem",
        "https://sns.us-gov-west-1.amazonaws.com:443/cert.pem",
        "https://sns.cn-north-1.amazonaws.com.cn/cert.pem",
        "https://sns.ap-southeast-2.amazonaws.com/cert.pem",
    ],
)
def test_amazon_s_sns_certificate_hosts_are_allowed(url: str) -> None:
    assert providers.allowed_url(url, providers.SNS_CERT_HOSTS)
