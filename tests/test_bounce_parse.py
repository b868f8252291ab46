"""Reading returned messages: who failed, how, and what must never suppress anyone (issue 21).

The messages are in tests/bounces/ (see its README); each is read by `senddock bounces parse`,
the command other tools drive, so the JSON contract is tested with the rules.
"""

from __future__ import annotations

import imaplib
import json
import os
import poplib
import smtplib
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import Envelope

import dovecot_box
import postfix_relay
from senddock.bounces.classify import classify
from senddock.bounces.parse import MAX_BYTES, parse
from support import wait_until
from web_support import free_port, free_ports

HERE = Path(__file__).parent / "bounces"
KEYS = ["file", "recipient", "kind", "reason", "status", "reply", "diagnostic"]

# file: (recipient, kind, reason, status, reply)
EXPECTED: dict[str, tuple[str | None, str, str | None, str | None, str | None]] = {
    "postfix-unknown-user": ("ada@example.com", "hard", "userunknown", "5.1.1", "550"),
    "gmail-no-such-account": ("bob.nobody@gmail.example", "hard", "userunknown", "5.1.1", "550"),
    "exchange-not-found": ("carol@contoso.example", "hard", "userunknown", "5.1.10", "550"),
    # RFC 7505's null MX shares 5.1.10 with Exchange's RecipientNotFound: the words tell.
    "null-mx": ("dan@nomail.example", "hard", "notaccept", "5.1.10", "556"),
    "exim-text": ("max@exim.example", "hard", "userunknown", "5.1.1", "550"),
    "qmail-text": ("nia@qmail.example", "hard", "userunknown", "5.1.1", None),
    "yahoo-text": ("oli@yahoo.example", "hard", "userunknown", None, "554"),
    "mailbox-full": ("erin@example.net", "soft", "mailboxfull", "5.2.2", "552"),
    "expired": ("lee@example.com", "soft", "expired", "4.4.7", None),
    # About us, not the recipient: nobody may be suppressed for these.
    "gmail-dmarc": ("fay@gmail.example", "policy", "authfailure", "5.7.26", "550"),
    "spamhaus-block": ("gus@example.com", "policy", "blocked", "5.7.1", "554"),
    "relay-denied": ("hal@elsewhere.example", "policy", "norelaying", "5.7.1", "554"),
    # Status 5.0.0, but the remote's own 5.7.1 and words say it is the content.
    "generic-status-policy-text": ("ivy@example.com", "policy", "spamdetected", "5.7.1", "550"),
    "arf-abuse": ("quinn@example.com", "complaint", "feedback", None, None),
    "arf-abuse-redacted": ("rae@example.com", "complaint", "feedback", None, None),
    # Not bounces at all.
    "delayed": (None, "none", None, None, None),
    "delivered": (None, "none", None, None, None),
    "out-of-office": (None, "none", None, None, None),
    "arf-not-spam": (None, "none", None, None, None),
    "dsn-no-recipient": (None, "none", None, None, None),
    "broken-mime": (None, "none", None, None, None),
}


def parse_files(*files: Path | str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "senddock", "bounces", "parse", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_every_message_in_the_corpus_is_read_as_expected_through_the_command() -> None:
    files = sorted(HERE.glob("*.eml"))
    assert {f.stem for f in files} == set(EXPECTED)
    done = parse_files(*files)
    assert done.returncode == 0, done.stderr
    got: dict[str, list[tuple[str | None, str, str | None, str | None, str | None]]] = {}
    for line in done.stdout.splitlines():
        record = json.loads(line)
        assert list(record) == KEYS, record
        stem = Path(record["file"]).stem
        got.setdefault(stem, []).append(
            (
                record["recipient"],
                record["kind"],
                record["reason"],
                record["status"],
                record["reply"],
            )
        )
        if record["kind"] == "none":
            assert record["diagnostic"], record  # why there is nothing in it
    assert got == {stem: [want] for stem, want in EXPECTED.items()}


def test_a_returned_original_names_our_message_id() -> None:
    report = parse((HERE / "postfix-unknown-user.eml").read_bytes())
    assert report.findings[0].message_id == "<b42.s7.abc@senddock.example.org>"
    assert parse((HERE / "arf-abuse.eml").read_bytes()).message_id == (
        "<b42.s9.abe@senddock.example.org>"
    )


def test_a_message_too_big_to_read_is_not_a_bounce_and_says_why(tmp_path: Path) -> None:
    big = tmp_path / "big.eml"
    head = (HERE / "postfix-unknown-user.eml").read_bytes()
    with big.open("wb") as f:
        f.write(head)
        f.write(b"x" * (50 * 1024 * 1024))
    done = parse_files(big)
    assert done.returncode == 0, done.stderr
    [record] = [json.loads(line) for line in done.stdout.splitlines()]
    assert (record["recipient"], record["kind"]) == (None, "none")
    assert f"larger than {MAX_BYTES // (1024 * 1024)} MB" in record["diagnostic"]


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xff\xfe\x00garbage\r\n\r\n\x00",
        b"Content-Type: multipart/report; boundary=x\r\n\r\n--x\r\n" * 2000,
        b"Content-Type: message/delivery-status\r\n\r\nFinal-Recipient: ;;;\r\nAction: failed\r\n",
        b"Subject: =?utf-8?b?not base64?=\r\nContent-Type: text/plain; charset=nonesuch\r\n\r\n"
        b"\xe9\xe8 user unknown",
    ],
)
def test_odd_bytes_never_raise(raw: bytes) -> None:
    report = parse(raw)
    for finding in report.findings:
        assert finding.kind in ("hard", "soft", "policy", "complaint")
    assert report.findings or report.why_none


def test_a_missing_file_is_a_one_line_error() -> None:
    done = parse_files("/nonexistent/bounce.eml")
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "does not exist" in done.stderr


@pytest.mark.parametrize(
    ("status", "reply", "diagnostic", "kind"),
    [
        ("5.1.1", "550", "user unknown", "hard"),
        # Disabled, not gone: counted as soft (Sisimai's `suspend`), suppressed after N of them.
        ("5.2.1", "550", "mailbox disabled", "soft"),
        ("5.4.4", None, "unable to route", "hard"),
        ("5.2.2", "552", "mailbox full", "soft"),
        ("4.2.2", "452", "over quota", "soft"),
        (None, "550", "quota exceeded", "soft"),
        ("5.7.1", "550", "user unknown", "policy"),  # x.7.x is about us, whatever the words
        ("5.1.1", "550", "user unknown, see our policy page", "hard"),
        (None, "550", "Message rejected as spam", "policy"),
        (None, "554", "blocked using b.barracudacentral.org", "policy"),
        ("5.3.4", "552", "message size exceeds fixed limit", "policy"),
        (None, None, "no such user here", "hard"),
        (None, "450", "greylisted, come back later", "soft"),
        # A failure that nothing names is not proof that the address is dead: soft (issue 34).
        (None, None, None, "soft"),
    ],
)
def test_classification_rules(
    status: str | None, reply: str | None, diagnostic: str | None, kind: str
) -> None:
    assert classify(status, reply, diagnostic) == kind


class _RemoteMx:
    """The remote MX behind the relay: refuses dead*, defers later*, accepts the rest."""

    async def handle_RCPT(
        self, server: object, session: object, envelope: Envelope, address: str, options: object
    ) -> str:
        if address.startswith("dead"):
            return f"550 5.1.1 <{address}>: Recipient address rejected: User unknown"
        if address.startswith("later"):
            return "451 4.3.0 mailbox busy, try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: object, session: object, envelope: Envelope) -> str:
        return "250 2.0.0 queued"


class _Returned:
    """The bounce domain's MX: keeps what it is given."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, list[str], bytes]] = []

    async def handle_DATA(self, server: object, session: object, envelope: Envelope) -> str:
        content = envelope.content
        assert isinstance(content, bytes)
        self.messages.append((str(envelope.mail_from), list(envelope.rcpt_tos), content))
        return "250 2.0.0 kept"


def need(why_not: str | None) -> None:
    """Skip without the real server here; fail when CI said they are installed."""
    if why_not is None:
        return
    if os.environ.get("SENDDOCK_REQUIRE_MAILSERVERS"):
        pytest.fail(f"{why_not}, and SENDDOCK_REQUIRE_MAILSERVERS is set")
    pytest.skip(why_not)


def test_a_real_postfix_relay_returns_a_dsn_naming_exactly_the_refused_recipients() -> None:
    need(postfix_relay.available())
    returned = _Returned()
    remote_port, bounces_port = free_ports(2)  # distinct: neither is listening yet
    remote = Controller(_RemoteMx(), hostname="127.0.0.1", port=remote_port)
    bounces = Controller(returned, hostname="127.0.0.1", port=bounces_port)
    remote.start()
    bounces.start()
    sender = f"b+tok1@{postfix_relay.BOUNCE_DOMAIN}"
    recipients = ["dead1@remote.example", "ok@remote.example", "later@remote.example"]
    # A UTF-8 address refused too: its DSN names it in UTF-8 (RFC 6533), never as U+FFFD.
    recipients += ["dead2@remote.example", "zoë@remote.example", "deadzoë@bücher.example"]
    try:
        with postfix_relay.private_postfix(free_port(), remote.port, bounces.port) as relay:
            body = (
                "From: News <news@example.org>\r\nTo: you\r\nSubject: Spring\r\n"
                "Message-ID: <b7.s1.x@senddock.example.org>\r\n\r\nHello\r\n"
            )
            with smtplib.SMTP("127.0.0.1", relay.port, timeout=30) as smtp:
                refused = smtp.sendmail(sender, recipients, body.encode(), ["SMTPUTF8"])
            assert refused == {}  # the relay takes everyone with 250, as real ones do
            assert wait_until(lambda: bool(returned.messages), timeout=30), relay.log()
            time.sleep(1)  # a second DSN would be a bug: give it the time to show
    finally:
        remote.stop()
        bounces.stop()
    [(mail_from, rcpt_tos, raw)] = returned.messages
    assert (mail_from, rcpt_tos) == ("<>", [sender])
    report = parse(raw)
    got = sorted((f.recipient, f.kind, f.status, f.reply) for f in report.findings)
    assert got == [
        ("dead1@remote.example", "hard", "5.1.1", "550"),
        ("dead2@remote.example", "hard", "5.1.1", "550"),
        ("deadzoë@bücher.example", "hard", "5.1.1", "550"),
    ]
    assert report.message_id == "<b7.s1.x@senddock.example.org>"


def test_a_postfix_dsn_delivered_to_a_dovecot_mailbox_reads_the_same_over_imap_and_pop3() -> None:
    need(postfix_relay.available() or dovecot_box.available())
    remote = Controller(_RemoteMx(), hostname="127.0.0.1", port=free_port())
    remote.start()
    sender = f"b+tok2@{postfix_relay.BOUNCE_DOMAIN}"
    try:
        with (
            dovecot_box.private_dovecot(*free_ports(3)) as box,
            postfix_relay.private_postfix(free_port(), remote.port, box.lmtp, lmtp=True) as relay,
        ):
            body = "From: news@example.org\r\nSubject: S\r\n"
            body += "Message-ID: <b8.s2.y@sd.example>\r\n\r\nHi\r\n"
            with smtplib.SMTP("127.0.0.1", relay.port, timeout=30) as smtp:
                smtp.sendmail(sender, ["dead3@remote.example", "ok@remote.example"], body)

            def in_box() -> list[bytes]:
                with imaplib.IMAP4("127.0.0.1", box.imap) as imap:
                    imap.login(box.user, box.password)
                    imap.select("INBOX", readonly=True)
                    _, ids = imap.search(None, "ALL")
                    found = []
                    for number in ids[0].split():
                        _, data = imap.fetch(number, "(RFC822)")
                        part = data[0]
                        assert isinstance(part, tuple)
                        found.append(part[1])
                    return found

            assert wait_until(lambda: bool(in_box()), timeout=30), relay.log() + box.log()
            [over_imap] = in_box()
            pop = poplib.POP3("127.0.0.1", box.pop3, timeout=30)
            try:
                pop.user(box.user)
                pop.pass_(box.password)
                assert pop.stat()[0] == 1
                over_pop3 = b"\r\n".join(pop.retr(1)[1])
            finally:
                pop.quit()
    finally:
        remote.stop()
    for raw in (over_imap, over_pop3):
        report = parse(raw)
        got = [(f.recipient, f.kind, f.status) for f in report.findings]
        assert got == [("dead3@remote.example", "hard", "5.1.1")]
        assert report.message_id == "<b8.s2.y@sd.example>"
