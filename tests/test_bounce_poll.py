"""Polling a real Dovecot mailbox that a real Postfix relay fills with its DSNs (issue 21.2)."""

from __future__ import annotations

import imaplib
import os
import smtplib
from collections.abc import Iterator

import pytest
from aiosmtpd.controller import Controller

import dovecot_box
import postfix_relay
from senddock.bounces.poll import Mailbox, poll_once
from senddock.bounces.store import Received, receive
from senddock.bounces.verp import ReturnPath
from senddock.db import connect
from support import Conn, jobs, send_campaign, wait_until
from test_bounce_parse import _RemoteMx
from web_support import free_port, free_ports

KEY = b"poll-test-key-" * 3
PATH = ReturnPath.parse(postfix_relay.BOUNCE_DOMAIN)


def need() -> None:
    why_not = postfix_relay.available() or dovecot_box.available()
    if why_not is None:
        return
    if os.environ.get("SENDDOCK_REQUIRE_MAILSERVERS"):
        pytest.fail(f"{why_not}, and SENDDOCK_REQUIRE_MAILSERVERS is set")
    pytest.skip(why_not)


@pytest.fixture
def box() -> Iterator[dovecot_box.Mailbox]:
    need()
    with dovecot_box.private_dovecot(*free_ports(3)) as mailbox:
        yield mailbox


def store_in(url: str, source: str) -> object:
    def store(raw: bytes, to: str | None) -> Received:
        with connect(url) as conn:
            return receive(conn, source, raw, to, PATH, KEY)

    return store


def count(box: dovecot_box.Mailbox) -> int:
    with imaplib.IMAP4("127.0.0.1", box.imap) as imap:
        imap.login(box.user, box.password)
        _, data = imap.select("INBOX", readonly=True)
        return int(data[0] or 0)


def relay_dsns(conn: Conn, box: dovecot_box.Mailbox, dead: list[str], alive: list[str]) -> int:
    """Send a broadcast's messages through a private Postfix whose DSNs go into the box."""
    _, bid = send_campaign(conn, "news", dead + alive)
    by_email = jobs(conn, bid)
    remote = Controller(_RemoteMx(), hostname="127.0.0.1", port=free_port())
    remote.start()
    try:
        with postfix_relay.private_postfix(free_port(), remote.port, box.lmtp, lmtp=True) as relay:
            with smtplib.SMTP("127.0.0.1", relay.port, timeout=30) as smtp:
                for email, job in by_email.items():
                    sender = PATH.address(KEY, bid, int(job["subscriber_id"]))
                    body = f"From: news@example.org\r\nTo: {email}\r\nSubject: S\r\n"
                    body += f"Message-ID: {job['message_id']}\r\n\r\nHi\r\n"
                    smtp.sendmail(sender, [email], body)
            assert wait_until(lambda: count(box) == len(dead), timeout=30), relay.log()
    finally:
        remote.stop()
    return bid


@pytest.mark.parametrize("protocol", ["imap", "pop3"])
def test_a_poll_records_each_dsn_once_matched_to_its_job_and_then_empties_the_box(
    conn: Conn, db_url: str, box: dovecot_box.Mailbox, protocol: str
) -> None:
    dead = ["dead1@remote.example", "dead2@remote.example"]
    bid = relay_dsns(conn, box, dead, ["ok1@remote.example", "later@remote.example"])
    port = box.imap if protocol == "imap" else box.pop3
    mailbox = Mailbox.parse(f"{protocol}://{box.user}:{box.password}@127.0.0.1:{port}?tls=none")
    done = poll_once(mailbox, store_in(db_url, protocol))  # type: ignore[arg-type]
    assert (done.error, done.seen, done.recorded, done.duplicates) == (None, 2, 2, 0)
    assert count(box) == 0
    found = conn.execute(
        "SELECT f.recipient, f.kind, f.broadcast_id, j.email FROM bounce_findings f"
        " LEFT JOIN broadcast_jobs j USING (broadcast_id, subscriber_id) ORDER BY recipient"
    ).fetchall()
    assert [(r["recipient"], r["kind"], r["broadcast_id"], r["email"]) for r in found] == [
        (d, "hard", bid, d) for d in dead
    ]
    # Matched by the return path the relay wrote in Delivered-To, not only the Message-ID.
    to = conn.execute("SELECT envelope_to FROM bounce_messages ORDER BY id").fetchall()
    assert [PATH.read(KEY, str(r["envelope_to"])) is not None for r in to] == [True, True]


def test_a_message_left_in_the_box_after_its_commit_is_not_applied_twice(
    conn: Conn, db_url: str, box: dovecot_box.Mailbox
) -> None:
    relay_dsns(conn, box, ["dead1@remote.example"], [])
    with imaplib.IMAP4("127.0.0.1", box.imap) as imap:  # the poller died before it deleted
        imap.login(box.user, box.password)
        imap.select("INBOX")
        _, data = imap.fetch("1", "(BODY.PEEK[])")
        part = data[0]
        assert isinstance(part, tuple)
        imap.append("INBOX", None, None, part[1])
    assert count(box) == 2
    mailbox = Mailbox.parse(f"imap://{box.user}:{box.password}@127.0.0.1:{box.imap}?tls=none")
    done = poll_once(mailbox, store_in(db_url, "imap"))  # type: ignore[arg-type]
    assert (done.error, done.seen, done.recorded, done.duplicates) == (None, 2, 1, 1)
    assert count(box) == 0
    row = conn.execute("SELECT count(*) AS n FROM bounce_findings").fetchone()
    assert row is not None and row["n"] == 1


def test_a_poll_whose_store_fails_leaves_every_message_in_the_box(
    conn: Conn, box: dovecot_box.Mailbox
) -> None:
    relay_dsns(conn, box, ["dead1@remote.example"], [])
    dead = "postgresql://postgres@127.0.0.1:1/nothing?connect_timeout=2"
    mailbox = Mailbox.parse(f"imap://{box.user}:{box.password}@127.0.0.1:{box.imap}?tls=none")
    done = poll_once(mailbox, store_in(dead, "imap"))  # type: ignore[arg-type]
    assert done.error is not None and done.recorded == 0
    assert count(box) == 1


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://x@host", "imap://"),
        ("imap://host", "user"),
        ("imap://u:p@host?tls=maybe", "tls="),
        ("pop3://u:p@host?after=move:Done", "POP3"),
    ],
)
def test_a_bad_mailbox_url_says_what_is_wrong(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Mailbox.parse(url)
