"""Provider webhooks over real HTTP to a real `senddock serve` and a real Postgres (issue 21).

Each provider's signed event (shapes from its documentation, signed here with our own keys as
tests/test_bounce_providers.py does) becomes findings matched to the job whose Message-ID it
reports, once however often it is delivered; a forged one, an oversized one, one for a
provider not configured change nothing. SNS certificates and confirmations are served by a
local https server whose CA the server is given (SENDDOCK_SNS_CA_FILE), on the host the
setting allows (SENDDOCK_SNS_CERT_HOSTS=127\\.0\\.0\\.1): the same https-only code path as Amazon's.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding

from senddock.bounces import providers
from senddock.db import connect
from support import Conn, jobs, send_campaign
from test_bounce_providers import KEY, MAILGUN_KEY, PEM, SENDGRID, SENDGRID_PUBLIC
from test_serve_exposed import EMAIL, PASSWORD, Browser
from web_support import Server, make_admin, start_server

TOPIC = "arn:aws:sns:eu-west-1:123456789012:ses-bounces"
POSTMARK = ("postmark-hook", "a long random password")
DSN = (Path(__file__).parent / "bounces" / "postfix-unknown-user.eml").read_bytes()


class Sns:
    """A local https server standing in for SNS: the certificate and the confirm URL."""

    def __init__(self, tmp: Path) -> None:
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1")
        self.ca_file = tmp / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        self.fetched: list[str] = []
        fetched = self.fetched

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fetched.append(self.path)
                body = PEM if self.path == "/cert.pem" else b"<ConfirmSubscriptionResponse/>"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert.configure_cert(context)
        self.http.socket = context.wrap_socket(self.http.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def sign(self, message: dict[str, Any], cert_url: str | None = None) -> bytes:
        signed = {
            "TopicArn": TOPIC,
            **message,
            "SignatureVersion": "2",
            "SigningCertURL": cert_url or self.url + "/cert.pem",
        }
        text = providers.sns_signed_text(signed)
        signature = KEY.sign(text, padding.PKCS1v15(), hashes.SHA256())
        signed["Signature"] = base64.b64encode(signature).decode()
        return json.dumps(signed).encode()


@pytest.fixture(scope="module")
def sns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sns]:
    server = Sns(tmp_path_factory.mktemp("sns"))
    yield server
    server.http.shutdown()


def hooks_env(sns: Sns) -> dict[str, str]:
    return {
        "SENDDOCK_SNS_TOPIC_ARNS": TOPIC,
        "SENDDOCK_SNS_CERT_HOSTS": r"127\.0\.0\.1",
        "SENDDOCK_SNS_CA_FILE": str(sns.ca_file),
        "SENDDOCK_MAILGUN_SIGNING_KEY": MAILGUN_KEY,
        "SENDDOCK_SENDGRID_PUBLIC_KEY": SENDGRID_PUBLIC,
        "SENDDOCK_POSTMARK_WEBHOOK_USER": POSTMARK[0],
        "SENDDOCK_POSTMARK_WEBHOOK_PASSWORD": POSTMARK[1],
    }


def _started(pg_url: str, env: dict[str, str]) -> Server:
    return start_server(pg_url, "smtp://127.0.0.1:1", workers=False, env=env)


@pytest.fixture(scope="module")
def hooks_server(pg_url: str, sns: Sns) -> Iterator[Server]:
    """One server for the module, every provider configured (each test empties the tables)."""
    with _started(pg_url, hooks_env(sns)) as server:
        yield server


@pytest.fixture
def hooks(hooks_server: Server) -> Iterator[httpx.Client]:
    with hooks_server.client() as client:
        yield client


def count(conn: Conn, table: str) -> int:
    row = conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()  # noqa: S608
    assert row is not None
    return int(row["n"])


def findings(conn: Conn) -> list[tuple[Any, ...]]:
    rows = conn.execute(
        "SELECT f.recipient, f.kind, f.broadcast_id, f.subscriber_id, m.source"
        " FROM bounce_findings f JOIN bounce_messages m ON m.id = f.message_id ORDER BY f.id"
    ).fetchall()
    return [tuple(r.values()) for r in rows]


def a_job(conn: Conn, email: str = "ada@example.com") -> tuple[int, int, str]:
    """A broadcast job sent to `email`: (broadcast, subscriber, our Message-ID)."""
    _, bid = send_campaign(conn, "news", [email, "other@example.com"])
    job = jobs(conn, bid)[email]
    return bid, int(job["subscriber_id"]), str(job["message_id"])


def ses_bounce(email: str, message_id: str) -> dict[str, Any]:
    ses = {
        "notificationType": "Bounce",
        "bounce": {
            "bounceType": "Permanent",
            "bounceSubType": "General",
            "bouncedRecipients": [
                {"emailAddress": email, "action": "failed", "status": "5.1.1",
                 "diagnosticCode": "smtp; 550 5.1.1 user unknown"}
            ],
        },
        "mail": {"commonHeaders": {"messageId": message_id}, "source": "news@example.org"},
    }  # fmt: skip
    return {
        "Type": "Notification",
        "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
        "Message": json.dumps(ses),
        "Timestamp": "2026-12-01T09:00:00.000Z",
    }


def mailgun(event: dict[str, Any], key: str = MAILGUN_KEY, token: str = "a8ce0edb2dd8") -> bytes:
    timestamp = str(int(time.time()))
    mac = hmac.new(key.encode(), (timestamp + token).encode(), hashlib.sha256).hexdigest()
    signature = {"timestamp": timestamp, "token": token, "signature": mac}
    return json.dumps({"signature": signature, "event-data": event}).encode()


def mailgun_failed(email: str, message_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "event": "failed",
        "severity": "permanent",
        "recipient": email,
        "reason": "bounce",
        "delivery-status": {"code": 550, "message": "5.1.1 The email account does not exist."},
        "message": {"headers": {"message-id": message_id.strip("<>")}},
        **extra,
    }


def sendgrid(events: list[dict[str, Any]], key: ec.EllipticCurvePrivateKey = SENDGRID) -> Any:
    body = json.dumps(events).encode()
    timestamp = str(int(time.time()))
    signature = key.sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    headers = {
        "X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(signature).decode(),
        "X-Twilio-Email-Event-Webhook-Timestamp": timestamp,
    }
    return body, headers


def test_an_ses_bounce_through_sns_names_its_job_once(
    conn: Conn, hooks: httpx.Client, sns: Sns
) -> None:
    bid, sid, ours = a_job(conn)
    body = sns.sign(ses_bounce("ada@example.com", ours))
    assert hooks.post("/webhooks/ses", content=body).status_code == 200
    assert findings(conn) == [("ada@example.com", "hard", bid, sid, "ses")]
    # SNS delivers again when it did not see our 200: nothing changes.
    assert hooks.post("/webhooks/ses", content=body).status_code == 200
    assert count(conn, "bounce_messages") == 1 and count(conn, "bounce_findings") == 1


def test_a_forged_or_foreign_sns_message_writes_nothing_and_fetches_nothing(
    conn: Conn, hooks: httpx.Client, sns: Sns
) -> None:
    _, _, ours = a_job(conn)
    good = json.loads(sns.sign(ses_bounce("ada@example.com", ours)))
    altered = {**good, "Message": good["Message"].replace("ada@", "eve@")}
    assert hooks.post("/webhooks/ses", content=json.dumps(altered)).status_code == 403
    sns.fetched.clear()
    for body in (
        # a certificate from a host the setting does not allow
        sns.sign(ses_bounce("ada@example.com", ours), cert_url="https://localhost:1/cert.pem"),
        # a topic that is not ours, though validly signed (anyone may make an SNS topic)
        sns.sign({**ses_bounce("ada@example.com", ours), "TopicArn": TOPIC + "-theirs"}),
        json.dumps({**good, "TopicArn": [TOPIC]}).encode(),
    ):
        assert hooks.post("/webhooks/ses", content=body).status_code == 403
    assert sns.fetched == []
    assert count(conn, "bounce_messages") == 0 and count(conn, "bounce_findings") == 0


def test_an_sns_subscription_is_confirmed_only_on_an_allowed_host(
    conn: Conn, hooks: httpx.Client, sns: Sns
) -> None:
    subscription = {
        "Type": "SubscriptionConfirmation",
        "MessageId": "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
        "Token": "2336412f37",
        "Message": "You have chosen to subscribe to the topic …",
        "SubscribeURL": sns.url + "/confirm?Action=ConfirmSubscription&Token=2336412f37",
        "Timestamp": "2026-12-01T09:00:00.000Z",
    }
    sns.fetched.clear()
    answer = hooks.post("/webhooks/ses", content=sns.sign(subscription))
    assert answer.status_code == 200, answer.text
    assert "/confirm?Action=ConfirmSubscription&Token=2336412f37" in sns.fetched
    sns.fetched.clear()
    port = sns.url.rsplit(":", 1)[1]
    for url in (f"https://localhost:{port}/confirm", f"http://127.0.0.1:{port}/confirm"):
        evil = sns.sign({**subscription, "SubscribeURL": url})
        assert hooks.post("/webhooks/ses", content=evil).status_code == 403
    assert [p for p in sns.fetched if p.startswith("/confirm")] == []
    assert count(conn, "bounce_messages") == 0


def test_a_mailgun_failure_names_its_job_once(conn: Conn, hooks: httpx.Client) -> None:
    bid, sid, ours = a_job(conn)
    body = mailgun(mailgun_failed("ada@example.com", ours))
    assert hooks.post("/webhooks/mailgun", content=body).status_code == 200
    assert hooks.post("/webhooks/mailgun", content=body).status_code == 200
    assert findings(conn) == [("ada@example.com", "hard", bid, sid, "mailgun")]
    # Mailgun signs only its timestamp and token: the same signature on another event (a
    # replay with the body swapped) changes nothing either.
    signature = json.loads(body)["signature"]
    other = mailgun_failed("other@example.com", ours)
    swapped = json.dumps({"signature": signature, "event-data": other})
    assert hooks.post("/webhooks/mailgun", content=swapped).status_code == 200
    assert count(conn, "bounce_messages") == 1 and count(conn, "bounce_findings") == 1


def test_a_mailgun_event_signed_otherwise_or_stale_writes_nothing(
    conn: Conn, hooks: httpx.Client
) -> None:
    _, _, ours = a_job(conn)
    event = mailgun_failed("ada@example.com", ours)
    stale = json.loads(mailgun(event))
    old = str(int(time.time()) - 3600)
    mac = hmac.new(MAILGUN_KEY.encode(), (old + "t").encode(), hashlib.sha256).hexdigest()
    stale["signature"] = {"timestamp": old, "token": "t", "signature": mac}
    for body in (mailgun(event, key="not the key"), json.dumps(stale).encode()):
        assert hooks.post("/webhooks/mailgun", content=body).status_code == 403
    assert hooks.post("/webhooks/mailgun", content=b"{not json").status_code == 400
    # Signed, but not in Mailgun's shape: 400, never a 500.
    odd = mailgun({"event": "failed", "message": "a string, not an object"})
    assert hooks.post("/webhooks/mailgun", content=odd).status_code == 400
    assert count(conn, "bounce_messages") == 0 and count(conn, "bounce_findings") == 0


def test_sendgrid_events_name_their_jobs_once(conn: Conn, hooks: httpx.Client) -> None:
    bid, sid, ours = a_job(conn)
    events = [
        {"email": "ada@example.com", "event": "bounce", "type": "bounce", "status": "5.1.1",
         "reason": "550 5.1.1 The email account does not exist.", "smtp-id": ours},
        {"email": "ada@example.com", "event": "spamreport", "smtp-id": ours},
        {"email": "ada@example.com", "event": "delivered", "smtp-id": ours},
    ]  # fmt: skip
    body, headers = sendgrid(events)
    for _ in range(2):
        assert hooks.post("/webhooks/sendgrid", content=body, headers=headers).status_code == 200
    assert findings(conn) == [
        ("ada@example.com", "hard", bid, sid, "sendgrid"),
        ("ada@example.com", "complaint", bid, sid, "sendgrid"),
    ]
    assert count(conn, "bounce_messages") == 1


def test_sendgrid_events_signed_otherwise_write_nothing(conn: Conn, hooks: httpx.Client) -> None:
    _, _, ours = a_job(conn)
    events = [{"email": "ada@example.com", "event": "spamreport", "smtp-id": ours}]
    body, headers = sendgrid(events, key=ec.generate_private_key(ec.SECP256R1()))
    assert hooks.post("/webhooks/sendgrid", content=body, headers=headers).status_code == 403
    body, headers = sendgrid(events)
    altered = body.replace(b"ada@", b"eve@")
    assert hooks.post("/webhooks/sendgrid", content=altered, headers=headers).status_code == 403
    assert hooks.post("/webhooks/sendgrid", content=body).status_code == 403  # no headers
    assert count(conn, "bounce_messages") == 0


def test_a_postmark_bounce_with_our_message_in_its_content_names_its_job(
    conn: Conn, hooks: httpx.Client
) -> None:
    bid, sid, ours = a_job(conn)
    content = DSN.replace(b"<b42.s7.abc@senddock.example.org>", ours.encode()).decode()
    event = {
        "RecordType": "Bounce", "ID": 4323372036854775807, "Type": "HardBounce",
        "TypeCode": 1, "MessageID": "883953f4-6105-42a2-a16a-77a8eac79483",
        "Email": "ada@example.com", "Details": "smtp;550 5.1.1 The email account does not exist.",
        "BouncedAt": "2026-12-01T09:00:00Z", "Content": content,
    }  # fmt: skip
    body = json.dumps(event).encode()
    for _ in range(2):
        answer = hooks.post("/webhooks/postmark", content=body, auth=POSTMARK)
        assert answer.status_code == 200, answer.text
    assert findings(conn) == [("ada@example.com", "hard", bid, sid, "postmark")]
    complaint = {"RecordType": "SpamComplaint", "Type": "SpamComplaint", "Email": "x@example.com"}
    assert hooks.post("/webhooks/postmark", json=complaint, auth=POSTMARK).status_code == 200
    assert findings(conn)[-1] == ("x@example.com", "complaint", None, None, "postmark")


def test_postmark_without_its_credentials_writes_nothing(conn: Conn, hooks: httpx.Client) -> None:
    event = {"RecordType": "Bounce", "Type": "HardBounce", "Email": "ada@example.com"}

    def basic(user: str, password: str) -> dict[str, str]:
        return {
            "Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        }

    wrong = [basic(POSTMARK[0], "wrong"), basic("someone", POSTMARK[1]), {"Authorization": "Basic"}]
    for headers in [*wrong, {}]:
        answer = hooks.post("/webhooks/postmark", json=event, headers=headers)
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"].startswith("Basic")
    assert count(conn, "bounce_messages") == 0


def test_a_webhook_body_is_capped_at_one_megabyte(conn: Conn, hooks: httpx.Client) -> None:
    bid, sid, ours = a_job(conn)
    # Bigger than the 64 KiB of an unauthenticated form, within the webhooks' cap: taken.
    big = mailgun(mailgun_failed("ada@example.com", ours, padding="x" * 300_000))
    assert hooks.post("/webhooks/mailgun", content=big).status_code == 200
    over = mailgun(mailgun_failed("ada@example.com", ours, padding="y" * (1024 * 1024)))
    assert hooks.post("/webhooks/mailgun", content=over).status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it comes
        for i in range(0, len(over), 65536):
            yield over[i : i + 65536]

    assert hooks.post("/webhooks/mailgun", content=chunks()).status_code == 413
    assert findings(conn) == [("ada@example.com", "hard", bid, sid, "mailgun")]


def test_a_provider_not_configured_is_not_there(db_url: str) -> None:
    with _started(db_url, {}) as server, server.client() as client:
        for provider in ("ses", "mailgun", "sendgrid", "postmark"):
            answer = client.post(f"/webhooks/{provider}", content=b"{}")
            assert answer.status_code == 404, provider
    with connect(db_url) as conn:
        assert count(conn, "bounce_messages") == 0


def test_postgres_lost_is_503_and_the_retry_is_recorded(db_url: str) -> None:
    with connect(db_url) as conn:
        bid, sid, ours = a_job(conn)
    env = {"SENDDOCK_MAILGUN_SIGNING_KEY": MAILGUN_KEY}
    named = db_url + ("&" if "?" in db_url else "?") + "application_name=sd-hooks-503"
    with _started(named, env) as server, server.client() as client:
        first = mailgun(mailgun_failed("other@example.com", ours), token="first")
        assert client.post("/webhooks/mailgun", content=first).status_code == 200
        with connect(db_url) as conn:  # every connection of this server is cut
            cut = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity"
                " WHERE application_name = 'sd-hooks-503'"
            ).fetchone()
            assert cut is not None and int(str(cut["n"])) > 0
        body = mailgun(mailgun_failed("ada@example.com", ours), token="second")
        answer = client.post("/webhooks/mailgun", content=body)
        assert answer.status_code == 503 and answer.headers["retry-after"]
        assert client.post("/webhooks/mailgun", content=body).status_code == 200
    with connect(db_url) as conn:
        assert findings(conn)[-1] == ("ada@example.com", "hard", bid, sid, "mailgun")
        assert count(conn, "bounce_messages") == 2


def test_a_bad_webhook_setting_stops_serve_at_start_without_echoing_it(db_url: str) -> None:
    key = base64.b64encode(b"the secret that is not a key").decode()
    with pytest.raises(RuntimeError) as failed:
        _started(db_url, {"SENDDOCK_SENDGRID_PUBLIC_KEY": key})
    said = str(failed.value)
    # One line for the person (the traceback above it is -v's, which start_server passes).
    assert "error: SENDDOCK_SENDGRID_PUBLIC_KEY is not SendGrid's verification key" in said
    assert key not in said


def test_a_dashboard_session_gives_a_webhook_nothing(
    db_url: str, conn: Conn, hooks_server: Server
) -> None:
    make_admin(db_url, EMAIL, PASSWORD)
    browser = Browser(hooks_server)
    try:
        assert browser.log_in() == 303
        event = {"RecordType": "Bounce", "Type": "HardBounce", "Email": "ada@example.com"}
        form = {"csrf": browser.csrf, **{k: str(v) for k, v in event.items()}}
        assert browser.http.post("/webhooks/postmark", json=event).status_code == 401
        assert browser.http.post("/webhooks/postmark", data=form).status_code == 401
        unsigned = json.dumps({"signature": {}, "event-data": event}).encode()
        assert browser.http.post("/webhooks/mailgun", content=unsigned).status_code == 403
        # A session's 8 MB allowance does not apply here either.
        over = b"x" * (1024 * 1024 + 1)
        assert browser.http.post("/webhooks/mailgun", content=over).status_code == 413
    finally:
        browser.close()
    assert count(conn, "bounce_messages") == 0
