"""One recipient's data never costs another recipient anything (issue 18).

Odd addresses, names and attributes among a thousand ordinary ones, sent by a real worker
process through a relay with and without SMTPUTF8: every ordinary recipient gets one message at
its first attempt, each odd one is sent or fails `rejected` with the reason, and the process
never dies. Before the fix, the first non-ASCII address killed the worker (UnicodeEncodeError in
the To header), and every job it held was charged the attempt.
"""

from __future__ import annotations

import email
import email.message
import email.policy
import json
import signal
from pathlib import Path

import pytest

from senddock.messages import compile_message
from senddock.messages.render import Recipient
from senddock.testing import Catcher
from support import Conn, jobs, send_campaign, start_worker, unfinished, wait_until, worker_env

ORDINARY = [f"user{i}@example.org" for i in range(1000)]
# address -> (name, attributes); the campaign's template reads `attributes.n + 1` when it is
# there, so one recipient's attribute of the wrong type fails their message alone.
ODD: dict[str, tuple[str, object]] = {
    "zoë@example.com": ("Zoë", {}),  # a non-ASCII local part: SMTPUTF8 only
    "ümlaut@exämple.de": ("Ümlaut", {}),  # and an IDNA domain
    "用户@例子.广告": ("用户", {}),  # no ASCII at all
    "plain@bücher.example": ("Bücher, Inc.", {}),  # ASCII local part, IDNA domain: goes anywhere
    "huge-name@example.org": ("x" * 200_000, {}),  # a 200 KB name
    "crlf@example.org": ("Eve\r\nBcc: victim@example.org", {}),  # header injection in a name
    "quote@example.org": ('Ann "The Hammer" O\'Neil <x@y>', {}),
    "wrongtype@example.org": ("W", {"n": "not a number"}),  # the template fails for them alone
    "deep@example.org": ("D", "DEEP"),  # attributes nested 3,000 levels deep: Python won't
    "big-attr@example.org": ("B", {"blob": "y" * 500_000}),
}
# Deliverable through any relay: ASCII on the wire (the IDNA domain in A-labels).
ANYWHERE = {a for a in ODD if a.split("@")[0].isascii()} - {
    "wrongtype@example.org",
    "deep@example.org",
}
NEEDS_UTF8 = {a for a in ODD if not a.split("@")[0].isascii()}
TEMPLATE = (
    "Hello {{ subscriber.name }}!\n"
    "{% if 'n' in subscriber.attributes %}{{ subscriber.attributes.n + 1 }}{% endif %}\n"
)


def _parsed(data: bytes) -> email.message.EmailMessage:
    """A message with UTF-8 headers (RFC 6532), parsed as such (the bytes parser won't)."""
    parsed = email.message_from_string(data.decode("utf-8"), policy=email.policy.SMTPUTF8)
    assert isinstance(parsed, email.message.EmailMessage)
    return parsed


def _drain(conn: Conn, db_url: str, relay: Catcher, bid: int, tmp_path: Path) -> None:
    """A real worker process sends the broadcast; it never dies and stops cleanly."""
    log = tmp_path / "worker.log"
    worker = start_worker(worker_env(db_url, relay.url), log=log)
    try:
        finished = wait_until(lambda: unfinished(conn, bid) == 0, timeout=120)
        alive = worker.poll() is None
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(30)
    logged = log.read_text(errors="replace")
    assert finished, logged[-3000:]
    assert alive and code == 0, logged[-3000:]


def _seed(conn: Conn) -> tuple[int, int]:
    cid, bid = send_campaign(conn, "odd", ORDINARY + list(ODD), name="odd")
    conn.execute("UPDATE campaigns SET text_body = %s WHERE id = %s", (TEMPLATE, cid))
    deep = "[" * 3000 + "]" * 3000
    for address, (name, attributes) in ODD.items():
        value = '{"deep": ' + deep + "}" if attributes == "DEEP" else json.dumps(attributes)
        conn.execute(
            "UPDATE subscribers SET name = %s, attributes = %s::jsonb WHERE email = %s",
            (name, value, address),
        )
    return cid, bid


@pytest.mark.parametrize("smtputf8", [True, False], ids=["smtputf8", "ascii-only-relay"])
def test_odd_recipients_cost_the_ordinary_ones_nothing(
    conn: Conn, db_url: str, tmp_path: Path, smtputf8: bool
) -> None:
    _, bid = _seed(conn)
    with Catcher() as relay:
        relay.smtputf8 = smtputf8
        _drain(conn, db_url, relay, bid, tmp_path)
        received = relay.count_by_rcpt()
    rows = jobs(conn, bid)
    # Every ordinary recipient: one message, at its first attempt.
    assert all(received[a] == 1 for a in ORDINARY)
    assert all((rows[a]["status"], rows[a]["attempts"]) == ("sent", 1) for a in ORDINARY)
    # The odd ones: sent, or rejected with the reason; nobody suppressed for our own refusal.
    sent = {a for a in ODD if rows[a.lower()]["status"] == "sent"}
    expected = ANYWHERE | (NEEDS_UTF8 if smtputf8 else set())
    assert sent == expected
    for address in set(ODD) - sent:
        row = rows[address.lower()]
        assert (row["status"], row["failure"]) == ("failed", "rejected"), row
        assert row["last_reply"], row
    assert "SMTPUTF8" in rows["zoë@example.com"]["last_reply"] or smtputf8
    assert "TypeError" in rows["wrongtype@example.org"]["last_reply"]
    assert "RecursionError" in rows["deep@example.org"]["last_reply"]
    assert conn.execute("SELECT count(*) AS n FROM suppressions").fetchone() == {"n": 0}
    assert conn.execute("SELECT count(*) AS n FROM worker_deaths").fetchone() == {"n": 0}
    # What arrived for the odd ones is a well-formed message: no injected header, lines short.
    by_rcpt = {r.rcpt: r.data for r in relay.received()}
    crlf = email.message_from_bytes(by_rcpt["crlf@example.org"], policy=email.policy.SMTP)
    assert crlf["Bcc"] is None and "victim" in str(crlf["To"])
    assert max(len(line) for line in by_rcpt["huge-name@example.org"].split(b"\r\n")) <= 998
    huge = email.message_from_bytes(by_rcpt["huge-name@example.org"], policy=email.policy.SMTP)
    assert len(str(huge["Subject"])) <= 998  # cut: encoding 200 KB of it took 0.4 s a message
    assert "plain@xn--bcher-kva.example" in received
    if smtputf8:
        zoe = _parsed(by_rcpt["zoë@example.com"])
        assert zoe["To"].addresses[0].addr_spec == "zoë@example.com"


def test_a_non_ascii_address_renders_in_preview_as_it_is_sent() -> None:
    message = compile_message("Hi {{ name }}", "News <news@example.org>", "Hello {{ name }}\n")
    for address in ("zoë@example.com", "ümlaut@exämple.de", "a@bücher.example"):
        data = message.render(Recipient(address, "Zoë Ümlaut", {}, 1), "<m@example.org>")
        to = _parsed(data)["To"].addresses[0]
        assert to.display_name == "Zoë Ümlaut"
        local = address.split("@")[0]
        assert to.username == local
        if local.isascii():  # what any relay takes: the IDNA domain in A-labels
            assert data.split(b"\r\n\r\n")[0].isascii()


def test_preview_of_a_non_ascii_subscriber_works_from_the_cli(db_url: str, tmp_path: Path) -> None:
    from support import senddock

    env = worker_env(db_url, "smtp://127.0.0.1:1")
    body = tmp_path / "t.txt"
    body.write_text("Hello {{ subscriber.name }}\n")
    assert senddock(env, "subscribers", "add", "zoë@example.com", "--list", "intl").returncode == 0
    made = senddock(
        env, "campaign", "create", "--name", "intl", "--list", "intl", "--subject", "Hi",
        "--from", "a@example.org", "--text-file", str(body),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    cid = made.stdout.strip().split()[-1]
    shown = senddock(env, "campaign", "preview", cid, "--to", "zoë@example.com")
    assert shown.returncode == 0, shown.stderr
    assert "zoë@example.com" in shown.stdout


BOMB = (
    "Hi {{ subscriber.name }} {{ 'a' * (subscriber.attributes.n or 1) }}\n"
    "{% for a in subscriber.attributes.xs or [] %}{% for b in subscriber.attributes.xs %}"
    "{% endfor %}{% endfor %}\n"
)


def test_a_template_that_bombs_for_one_recipient_fails_that_job_alone(
    conn: Conn, db_url: str, tmp_path: Path
) -> None:
    """One subscriber's data makes the template build 100 MB, another's loop 400 million times
    (no call inside, so only the worker's alarm stops it): those two jobs fail `rejected` with
    the reason, in a few seconds, and the worker sends everyone else (issue 19, item 6)."""
    ordinary = ORDINARY[:200]
    _, bid = send_campaign(conn, "bomb", [*ordinary, "big@example.org", "loop@example.org"])
    conn.execute("UPDATE campaigns SET text_body = %s", (BOMB,))
    conn.execute("UPDATE subscribers SET attributes = %s WHERE email = %s",
                 ('{"n": 100000000}', "big@example.org"))  # fmt: skip
    xs = json.dumps({"xs": list(range(20_000))})
    conn.execute("UPDATE subscribers SET attributes = %s WHERE email = %s",
                 (xs, "loop@example.org"))  # fmt: skip
    with Catcher() as relay:
        _drain(conn, db_url, relay, bid, tmp_path)
        received = relay.count_by_rcpt()
    rows = jobs(conn, bid)
    assert all(received[a] == 1 and rows[a]["status"] == "sent" for a in ordinary)
    big, loop = rows["big@example.org"], rows["loop@example.org"]
    assert (big["status"], big["failure"]) == ("failed", "rejected")
    assert "may not make more than" in big["last_reply"], big["last_reply"]
    assert (loop["status"], loop["failure"]) == ("failed", "rejected")
    assert "longer than" in loop["last_reply"], loop["last_reply"]
