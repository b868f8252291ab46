"""The bounce listener over real SMTP and a real Postgres (issue 21.2).

250 only once the bounce is committed; 451 when Postgres cannot take it; each bounce kept
once; mail for other addresses, oversized mail and a crowd from one client refused.
"""

from __future__ import annotations

import smtplib
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from senddock.bounces.listener import BounceHandler, BounceListener
from senddock.bounces.store import Received, receive
from senddock.bounces.verp import ReturnPath
from senddock.db import connect
from support import Conn, jobs, send_campaign
from web_support import free_port

KEY = b"bounce-test-key-" * 2
PATH = ReturnPath.parse("bounces.example.org")
DSN = (Path(__file__).parent / "bounces" / "postfix-unknown-user.eml").read_bytes()
DSN = DSN.replace(b"\n", b"\r\n")  # as it travels


def dsn_for(email: str, message_id: str) -> bytes:
    return DSN.replace(b"ada@example.com", email.encode()).replace(
        b"<b42.s7.abc@senddock.example.org>", message_id.encode()
    )


def store_in(url: str) -> BounceHandler:
    def store(raw: bytes, to: list[str]) -> Received:
        with connect(url) as conn:
            return receive(conn, "smtp", raw, to, PATH, KEY)

    return BounceHandler(PATH, store)


@pytest.fixture
def listening(db_url: str) -> Iterator[BounceListener]:
    listener = BounceListener(store_in(db_url), "127.0.0.1", free_port(), per_client=3)
    listener.start()
    yield listener
    listener.stop()


def send(listener: BounceListener, to: str, raw: bytes) -> tuple[int, bytes]:
    with smtplib.SMTP("127.0.0.1", listener.port, timeout=30) as smtp:
        smtp.ehlo()
        smtp.mail("<>")
        code, said = smtp.rcpt(to)
        if code != 250:
            return code, said
        return smtp.data(raw)


def rows(conn: Conn, table: str) -> list[dict[str, object]]:
    return conn.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()  # noqa: S608


def test_a_dsn_to_a_return_path_is_committed_before_its_250_and_names_its_job(
    conn: Conn, listening: BounceListener
) -> None:
    _, bid = send_campaign(conn, "news", ["ada@example.com", "bob@example.com"])
    job = jobs(conn, bid)["ada@example.com"]
    to = PATH.address(KEY, bid, int(job["subscriber_id"]))
    code, said = send(listening, to, dsn_for("ada@example.com", str(job["message_id"])))
    assert code == 250, said
    # Committed when the 250 came: a fresh connection sees it.
    [message] = rows(conn, "bounce_messages")
    assert (message["state"], message["envelope_to"], message["source"]) == ("read", to, "smtp")
    [finding] = rows(conn, "bounce_findings")
    assert (finding["recipient"], finding["kind"], finding["status"]) == (
        "ada@example.com",
        "hard",
        "5.1.1",
    )
    assert (finding["broadcast_id"], finding["subscriber_id"]) == (bid, job["subscriber_id"])
    # The same bounce again (a relay that lost our 250) changes nothing.
    again = send(listening, to, dsn_for("ada@example.com", str(job["message_id"])))
    assert again[0] == 250 and b"seen before" in again[1]
    assert len(rows(conn, "bounce_messages")) == 1 and len(rows(conn, "bounce_findings")) == 1


def test_a_forged_return_path_or_message_id_matches_nobody(
    conn: Conn, listening: BounceListener
) -> None:
    _, bid = send_campaign(conn, "news", ["ada@example.com"])
    job = jobs(conn, bid)["ada@example.com"]
    sid = int(job["subscriber_id"])
    forged_to = PATH.address(b"not our key" * 3, bid, sid)
    made_up_id = f"<sd.{bid}.{sid}.guessed@news.example.org>"
    assert send(listening, forged_to, dsn_for("ada@example.com", made_up_id))[0] == 250
    [finding] = rows(conn, "bounce_findings")
    assert finding["broadcast_id"] is None and finding["subscriber_id"] is None
    [message] = rows(conn, "bounce_messages")
    assert message["why"] == "matches no message of ours"
    # Without VERP, our own Message-ID in the returned original still names the job.
    plain_to = "b@bounces.example.org"
    assert send(listening, plain_to, dsn_for("ada@example.com", str(job["message_id"])))[0] == 250
    assert rows(conn, "bounce_findings")[-1]["broadcast_id"] == bid


def test_mail_for_another_address_or_over_the_cap_is_refused(conn: Conn, db_url: str) -> None:
    listener = BounceListener(store_in(db_url), "127.0.0.1", free_port(), max_bytes=64 * 1024)
    listener.start()
    try:
        for other in ("ada@example.com", "postmaster@bounces.example.org", "b+x@evil.example"):
            code, _ = send(listener, other, DSN)
            assert code == 550, other
        big = DSN + (b"x" * 998 + b"\r\n") * 200
        code, said = send(listener, "b@bounces.example.org", big)
        assert code == 552, said
    finally:
        listener.stop()
    assert rows(conn, "bounce_messages") == []


def test_postgres_down_is_451_so_the_relay_keeps_the_bounce(pg_url: str) -> None:
    with socket.socket() as s:  # a port where no Postgres listens
        s.bind(("127.0.0.1", 0))
        dead = f"postgresql://postgres@127.0.0.1:{s.getsockname()[1]}/nothing?connect_timeout=2"
    listener = BounceListener(store_in(dead), "127.0.0.1", free_port())
    listener.start()
    try:
        code, said = send(listener, "b@bounces.example.org", DSN)
    finally:
        listener.stop()
    assert code == 451, said


def test_one_client_holds_at_most_its_share_of_connections(listening: BounceListener) -> None:
    held = [smtplib.SMTP("127.0.0.1", listening.port, timeout=30) for _ in range(3)]
    try:
        with pytest.raises(smtplib.SMTPConnectError) as refused:
            smtplib.SMTP("127.0.0.1", listening.port, timeout=30)
        assert refused.value.smtp_code == 421
    finally:
        for smtp in held:
            smtp.quit()
    # Their slots are given back.
    with smtplib.SMTP("127.0.0.1", listening.port, timeout=30) as smtp:
        assert smtp.noop()[0] == 250
