"""Issue 21 faults: a real `senddock bounces serve` and a real `senddock bounces poll` SIGKILLed
mid-batch, then started again: no bounce lost, none applied twice.

The listener's promise is its 250: every DSN a client got a 250 for is committed, and one sent
again (the relay lost our 250, or the connection died before it came) changes nothing. The
poller's: a message leaves the box only after its commit, so what the kill left there is
recorded by the next pass, and what was recorded but not yet deleted is recognised.
"""

from __future__ import annotations

import imaplib
import re
import signal
import smtplib
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

import dovecot_box
from senddock.bounces.verp import ReturnPath
from senddock.campaigns import compose
from senddock.config import Settings
from senddock.queue.counts import count
from support import Conn, jobs, send_campaign, senddock, wait_until, worker_env
from test_bounce_cli import _listening
from test_bounce_listener import dsn_for
from test_bounce_poll import box as box  # the private Dovecot fixture
from test_bounce_poll import count as in_box
from web_support import free_port

DOMAIN = "bounces.example.org"
CLIENTS = 4


def addresses(n: int) -> list[str]:
    """Recipients, one in four with a non-ASCII local part and domain."""
    return [f"zoë{i}@bücher.example" if i % 4 == 0 else f"user{i}@example.com" for i in range(n)]


def returned(conn: Conn, db_url: str, n: int) -> tuple[int, list[tuple[str, str, bytes]]]:
    """A sent broadcast of n and, for each job, (address, its VERP return path, its DSN)."""
    _, bid = send_campaign(conn, "news", addresses(n))
    key = compose.link_key(conn, Settings(database_url=db_url))
    path = ReturnPath.parse(DOMAIN)
    dsns = [
        (
            email,
            path.address(key, bid, int(job["subscriber_id"])),
            dsn_for(email, job["message_id"]),
        )
        for email, job in sorted(jobs(conn, bid).items())
    ]
    return bid, dsns


def recorded(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) AS n FROM bounce_messages").fetchone()
    assert row is not None
    return int(row["n"])


def assert_each_applied_once(conn: Conn, bid: int, dsns: list[tuple[str, str, bytes]]) -> None:
    """Every DSN is one message row, one matched finding, one suppression, counted once."""
    messages = conn.execute("SELECT envelope_to, state FROM bounce_messages").fetchall()
    assert sorted(str(r["envelope_to"]) for r in messages) == sorted(to for _, to, _ in dsns)
    assert {r["state"] for r in messages} == {"read"}
    findings = conn.execute("SELECT broadcast_id, kind FROM bounce_findings").fetchall()
    assert len(findings) == len(dsns)
    assert {(r["broadcast_id"], r["kind"]) for r in findings} == {(bid, "hard")}
    rows = conn.execute("SELECT email, reason FROM suppressions").fetchall()
    assert sorted(str(r["email"]) for r in rows) == sorted(email for email, _, _ in dsns)
    assert {r["reason"] for r in rows} == {"bounce"}
    effects = conn.execute("SELECT count(*) AS n FROM bounce_effects").fetchone()
    assert effects is not None and effects["n"] == len(dsns)
    assert count(conn, bid).bounced_later == len(dsns)
    assert {j["bounce_kind"] for j in jobs(conn, bid).values()} == {"hard"}


def serve(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "senddock", "bounces", "serve", "--port", str(port)]
    proc = subprocess.Popen(args, env=env, stderr=subprocess.DEVNULL)
    assert wait_until(lambda: _listening(port), timeout=30)
    return proc


def deliver(port: int, batch: list[tuple[int, str, bytes]], acked: set[int]) -> None:
    """One relay's session: each DSN in turn, its index in `acked` once it got a 250; the
    first failure (the listener died) ends the session, as it would a relay's."""
    try:
        with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
            smtp.ehlo()
            for index, to, raw in batch:
                smtp.mail("<>")
                if smtp.rcpt(to)[0] != 250 or smtp.data(raw)[0] != 250:
                    return
                acked.add(index)
    except (OSError, smtplib.SMTPException):
        return


def deliver_all(port: int, dsns: list[tuple[int, str, bytes]]) -> set[int]:
    """The DSNs split among CLIENTS concurrent sessions; the indexes that got a 250."""
    acked: set[int] = set()
    threads = [
        threading.Thread(target=deliver, args=(port, dsns[i::CLIENTS], acked))
        for i in range(CLIENTS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return acked


def test_serve_killed_mid_batch_loses_no_acknowledged_bounce_and_applies_none_twice(
    conn: Conn, db_url: str
) -> None:
    bid, dsns = returned(conn, db_url, 120)
    env = worker_env(db_url, "smtp://127.0.0.1:1?tls=none", SENDDOCK_BOUNCE_DOMAIN=DOMAIN)
    port = free_port()
    first = serve(env, port)
    numbered = [(i, to, raw) for i, (_, to, raw) in enumerate(dsns)]
    acked: set[int] = set()
    sender = threading.Thread(target=lambda: acked.update(deliver_all(port, numbered)))
    try:
        sender.start()
        assert wait_until(lambda: recorded(conn) >= len(dsns) // 3, timeout=60, every=0.01)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        sender.join(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert 0 < len(acked) < len(dsns), "the kill came mid-batch"
    # Nothing acknowledged is lost: every 250 was a commit.
    kept = {str(r["envelope_to"]) for r in conn.execute("SELECT envelope_to FROM bounce_messages")}
    assert {dsns[i][1] for i in acked} <= kept
    # The relays try again with everything (a lost 250 looks like no 250 to them).
    second = serve(env, port)
    try:
        assert deliver_all(port, numbered) == set(range(len(dsns)))
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=30)
    assert_each_applied_once(conn, bid, dsns)


def fill(box: dovecot_box.Mailbox, dsns: list[tuple[str, str, bytes]]) -> None:
    """Put each DSN in the box as the delivering MTA would, its return path in Delivered-To."""
    with imaplib.IMAP4("127.0.0.1", box.imap) as imap:
        imap.login(box.user, box.password)
        for _, to, raw in dsns:
            imap.append("INBOX", None, None, f"Delivered-To: {to}\r\n".encode() + raw)


def left_in(box: dovecot_box.Mailbox) -> list[str]:
    """The Delivered-To of each message still in the box, not flagged deleted (one the kill
    caught between its flag and its expunge, after its commit)."""
    with imaplib.IMAP4("127.0.0.1", box.imap) as imap:
        imap.login(box.user, box.password)
        imap.select("INBOX", readonly=True)
        _, found = imap.search(None, "NOT", "DELETED")
        numbers = found[0].decode().split() if found and found[0] else []
        if not numbers:
            return []
        _, parts = imap.fetch(",".join(numbers), "(BODY.PEEK[HEADER.FIELDS (DELIVERED-TO)])")
    heads = [p[1].decode() for p in parts if isinstance(p, tuple)]
    return [m.group(1).strip() for h in heads if (m := re.search(r"Delivered-To:(.*)", h))]


@pytest.fixture
def poll_env(
    db_url: str, box: dovecot_box.Mailbox, request: pytest.FixtureRequest
) -> Iterator[dict[str, str]]:
    protocol = request.param
    port = box.imap if protocol == "imap" else box.pop3
    mailbox = f"{protocol}://{box.user}:{box.password}@127.0.0.1:{port}?tls=none"
    yield worker_env(
        db_url,
        "smtp://127.0.0.1:1?tls=none",
        SENDDOCK_BOUNCE_DOMAIN=DOMAIN,
        SENDDOCK_BOUNCE_MAILBOX=mailbox,
    )


@pytest.mark.parametrize("poll_env", ["imap", "pop3"], indirect=True)
def test_poll_killed_mid_batch_loses_no_message_and_applies_none_twice(
    conn: Conn, db_url: str, box: dovecot_box.Mailbox, poll_env: dict[str, str]
) -> None:
    bid, dsns = returned(conn, db_url, 45)
    fill(box, dsns)
    args = [sys.executable, "-m", "senddock", "bounces", "poll", "--once"]
    first = subprocess.Popen(args, env=poll_env, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: recorded(conn) >= len(dsns) // 3, timeout=60, every=0.01)
        first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=30) == -signal.SIGKILL, "the kill came mid-batch"
    finally:
        if first.poll() is None:
            first.kill()
    # Nothing lost: each message is recorded, or still in the box, or both (committed, not
    # yet deleted); POP3 deletes only at QUIT, so its box still holds every one.
    kept = {str(r["envelope_to"]) for r in conn.execute("SELECT envelope_to FROM bounce_messages")}
    assert 0 < len(kept) < len(dsns)
    left = left_in(box)
    assert kept | set(left) == {to for _, to, _ in dsns}
    if "pop3" in poll_env["SENDDOCK_BOUNCE_MAILBOX"]:
        assert len(left) == len(dsns)
    again = senddock(poll_env, "bounces", "poll", "--once")  # expunges what the kill left flagged
    assert again.returncode == 0, again.stderr
    seen = len(left)
    assert f"{seen} seen, {seen - len(kept & set(left))} recorded" in again.stderr, again.stderr
    assert in_box(box) == 0
    assert_each_applied_once(conn, bid, dsns)


@pytest.mark.parametrize(
    ("poll_env", "stage", "left", "recorded_again"),
    [
        # Killed after the 5th commit, before its flag: it is read again, a duplicate.
        ("imap", "stored", 8, 7),
        # Killed between the 5th's flag and its expunge: the next pass expunges it unread.
        ("imap", "flagged", 7, 7),
        # POP3 deletes at QUIT only: a kill leaves every message, the 5 are duplicates.
        ("pop3", "stored", 12, 7),
    ],
    indirect=["poll_env"],
)
def test_poll_killed_at_each_step_of_a_message_loses_none_and_applies_none_twice(
    conn: Conn,
    db_url: str,
    box: dovecot_box.Mailbox,
    poll_env: dict[str, str],
    stage: str,
    left: int,
    recorded_again: int,
) -> None:
    """A SIGKILL at the exact step (SENDDOCK_TEST_KILL_POLL), not at a moment a timer
    picks: after the 5th of 12 commits (before its flag), or between its flag and its
    expunge. Fails if a message left the box before its commit (the box would hold fewer
    than `left`) or if a re-read applied one twice (assert_each_applied_once)."""
    bid, dsns = returned(conn, db_url, 12)
    fill(box, dsns)
    killed = senddock(
        {**poll_env, "SENDDOCK_TEST_KILL_POLL": f"{stage}:5"}, "bounces", "poll", "--once"
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    kept = {str(r["envelope_to"]) for r in conn.execute("SELECT envelope_to FROM bounce_messages")}
    assert kept == {to for _, to, _ in dsns[:5]}  # the box's order: the first five
    assert len(left_in(box)) == left
    again = senddock(poll_env, "bounces", "poll", "--once")
    assert again.returncode == 0, again.stderr
    assert f"{left} seen, {recorded_again} recorded" in again.stderr, again.stderr
    assert in_box(box) == 0
    assert_each_applied_once(conn, bid, dsns)
