"""Bounces nobody can forge (issue 34.2), through every way a report comes in.

Until migration 0028 our Message-ID's token was 8 hex characters per broadcast and subscriber
ids are sequential: any recipient could swap the id in their own Message-ID and suppress
everyone with a forged DSN or ARF report (199 of 200 members in 9.6 s). Now only a report to
a recipient's signed return path, or one quoting a Message-ID that carries that recipient's
own token, changes anyone. Each channel is the real thing: `senddock bounces serve` over SMTP,
`senddock bounces ingest` with the message on stdin, `senddock bounces poll` reading a real
Dovecot over IMAP.
"""

from __future__ import annotations

import os
import signal
import smtplib
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

import dovecot_box
from senddock.bounces.store import receive
from senddock.messages.message_id import names, token
from senddock.queue.bounces import SoftLimit
from senddock.queue.counts import count
from support import Conn, jobs, send_campaign, senddock, wait_until
from test_bounce_cli import DOMAIN, _listening, env_for, ingest, verp
from test_bounce_effects import KEY, PATH, report
from web_support import free_port

PEOPLE = ["ada@example.com", "bob@example.com", "mallory@example.com", "quinn@example.com"]
FEEDBACK = f"b@{DOMAIN}"  # where a feedback loop or a relay without VERP writes

Deliver = Callable[[bytes, str], None]


def forged(by_email: dict[str, dict[str, object]], victim: str) -> str:
    """What mallory writes: her own Message-ID with the victim's subscriber id in it."""
    mine = str(by_email["mallory@example.com"]["message_id"])
    b, s = mine[1:].split(".")[1:3]
    assert mine.startswith(f"<sd.{b}.{s}.")
    return mine.replace(f"<sd.{b}.{s}.", f"<sd.{b}.{by_email[victim]['subscriber_id']}.", 1)


def suppressed(conn: Conn) -> dict[str, str]:
    rows = conn.execute("SELECT email, reason FROM suppressions ORDER BY email").fetchall()
    return {str(r["email"]): str(r["reason"]) for r in rows}


def forged_reports_change_nobody_genuine_ones_count(
    conn: Conn, db_url: str, deliver: Deliver
) -> None:
    _, bid = send_campaign(conn, "news", PEOPLE)
    by_email = jobs(conn, bid)
    # A forged DSN and a forged ARF complaint: recorded, matched to nobody, change nobody.
    deliver(
        report("postfix-unknown-user", "ada@example.com", forged(by_email, "ada@example.com")),
        FEEDBACK,
    )
    deliver(report("arf-abuse", "bob@example.com", forged(by_email, "bob@example.com")), FEEDBACK)
    assert suppressed(conn) == {}
    unmatched = conn.execute(
        "SELECT count(*) AS n FROM bounce_findings WHERE broadcast_id IS NULL"
    ).fetchone()
    assert unmatched == {"n": 2}
    assert (count(conn, bid).bounced_later, count(conn, bid).complaints) == (0, 0)
    # A genuine DSN to ada's return path suppresses her; a feedback loop's report quoting
    # quinn's real Message-ID counts his complaint.
    real_dsn = report("postfix-unknown-user", "ada@example.com", "<x@mta.example>")
    deliver(real_dsn, verp(conn, db_url, bid, by_email["ada@example.com"]))
    quinn = str(by_email["quinn@example.com"]["message_id"])
    deliver(report("arf-abuse", "quinn@example.com", quinn), FEEDBACK)
    assert suppressed(conn) == {"ada@example.com": "bounce", "quinn@example.com": "complaint"}
    assert (count(conn, bid).bounced_later, count(conn, bid).complaints) == (1, 1)


def test_through_bounces_serve(conn: Conn, db_url: str) -> None:
    port = free_port()
    args = [sys.executable, "-m", "senddock", "bounces", "serve", "--port", str(port)]
    proc = subprocess.Popen(args, env=env_for(db_url), stderr=subprocess.PIPE)

    def deliver(raw: bytes, to: str) -> None:
        with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
            assert smtp.sendmail("", [to], raw) == {}

    try:
        assert wait_until(lambda: _listening(port), timeout=30)
        forged_reports_change_nobody_genuine_ones_count(conn, db_url, deliver)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def test_through_bounces_ingest(conn: Conn, db_url: str) -> None:
    env = env_for(db_url)

    def deliver(raw: bytes, to: str) -> None:
        done = ingest(env, raw, "--recipient", to)
        assert done.returncode == 0, done.stderr

    forged_reports_change_nobody_genuine_ones_count(conn, db_url, deliver)


@pytest.fixture
def box() -> Iterator[dovecot_box.Mailbox]:
    why_not = dovecot_box.available()
    if why_not is not None:
        if os.environ.get("SENDDOCK_REQUIRE_MAILSERVERS"):
            pytest.fail(why_not)
        pytest.skip(why_not)
    with dovecot_box.private_dovecot(free_port(), free_port(), free_port()) as mailbox:
        yield mailbox


def test_through_the_imap_poller(conn: Conn, db_url: str, box: dovecot_box.Mailbox) -> None:
    url = f"imap://{box.user}:{box.password}@127.0.0.1:{box.imap}?tls=none"
    env = env_for(db_url, SENDDOCK_BOUNCE_MAILBOX=url)

    def deliver(raw: bytes, to: str) -> None:
        # As the MX's Postfix delivers it: the address it came to in X-Original-To.
        with smtplib.LMTP("127.0.0.1", box.lmtp, timeout=30) as lmtp:
            lmtp.sendmail("", [to], f"X-Original-To: {to}\r\n".encode() + raw)
        done = senddock(env, "bounces", "poll", "--once")
        assert done.returncode == 0, done.stderr
        assert done.stderr.startswith("1 seen, 1 recorded"), done.stderr

    forged_reports_change_nobody_genuine_ones_count(conn, db_url, deliver)


def test_a_report_at_one_signed_path_changes_only_its_owner(conn: Conn) -> None:
    _, bid = send_campaign(conn, "news", PEOPLE)
    by_email = jobs(conn, bid)
    mallory = PATH.address(KEY, bid, int(by_email["mallory@example.com"]["subscriber_id"]))
    ada = str(by_email["ada@example.com"]["message_id"])
    raw = report("postfix-unknown-user", "ada@example.com", ada)
    got = receive(conn, "pipe", raw, mallory, PATH, KEY, SoftLimit(3, 30))
    assert (got.findings, got.matched) == (1, 1)
    assert suppressed(conn) == {"mallory@example.com": "bounce"}


def test_a_message_id_from_before_the_per_recipient_token_changes_nobody(conn: Conn) -> None:
    _, bid = send_campaign(conn, "news", PEOPLE)
    sid = int(jobs(conn, bid)["ada@example.com"]["subscriber_id"])
    old = f"<sd.{bid}.{sid}.1a2b3c4d@example.org>"  # as enqueued before migration 0028
    conn.execute(
        "UPDATE broadcast_jobs SET message_id = %s WHERE broadcast_id = %s AND subscriber_id = %s",
        (old, bid, sid),
    )
    raw = report("postfix-unknown-user", "ada@example.com", old)
    got = receive(conn, "pipe", raw, FEEDBACK, PATH, KEY, SoftLimit(3, 30))
    assert (got.findings, got.matched) == (1, 0)
    assert suppressed(conn) == {}


def test_each_job_s_message_id_carries_its_own_token_made_at_enqueue(conn: Conn) -> None:
    _, bid = send_campaign(conn, "news", PEOPLE)
    row = conn.execute("SELECT value FROM app_secrets WHERE name = 'message_id_key'").fetchone()
    assert row is not None
    key = str(row["value"]).encode()
    by_email = jobs(conn, bid)
    tokens = set()
    for job in by_email.values():
        sid = int(job["subscriber_id"])
        assert job["message_id"] == f"<sd.{bid}.{sid}.{token(key, bid, sid)}@example.org>"
        assert names(key, str(job["message_id"])) == (bid, sid)
        tokens.add(token(key, bid, sid))
    assert len(tokens) == len(PEOPLE)
    # Another key, another subscriber id, a shortened or altered token: nobody.
    ada = str(by_email["ada@example.com"]["message_id"])
    assert names(b"another key", ada) is None
    assert names(key, forged(by_email, "ada@example.com")) is None
    assert names(key, ada.replace(".", ".0", 1)) is None
