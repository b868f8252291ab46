"""The bounce MX as an attacker sees it (issue 34.3), over real SMTP and a real Postgres.

Before: a 2.3 MB message with 20,000 recipient blocks sent to ten of our addresses took 33-54 s
and was kept ten times, never purged; 11 connections at once from one address got 10 refused.
Now a transaction's message is kept and read once, its findings are capped, a client sends at
most so many messages a minute, the 11th connection (not the first 10) is refused, and the
bytes of what came back are purged after SENDDOCK_BOUNCE_RAW_DAYS.
"""

from __future__ import annotations

import asyncio
import signal
import smtplib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from senddock.bounces.listener import BounceHandler, BounceListener
from senddock.bounces.store import MAX_FINDINGS, Received, receive
from senddock.db import connect
from senddock.delivery.cleaner import clean
from senddock.queue.counts import count
from support import Conn, jobs, send_campaign, wait_until
from test_bounce_cli import _listening, env_for
from test_bounce_listener import DSN, KEY, PATH, rows, send
from web_support import free_port


def store_in(url: str) -> BounceHandler:
    def store(raw: bytes, to: list[str]) -> Received:
        with connect(url) as conn:
            return receive(conn, "smtp", raw, to, PATH, KEY)

    return BounceHandler(PATH, store)


@pytest.fixture
def handler(db_url: str) -> BounceHandler:
    return store_in(db_url)


@pytest.fixture
def listening(handler: BounceHandler) -> Iterator[BounceListener]:
    listener = BounceListener(handler, "127.0.0.1", free_port(), per_client=10)
    listener.start()
    yield listener
    listener.stop()


def greeting(s: socket.socket) -> bytes:
    s.settimeout(30)
    said = b""
    while not said.endswith(b"\r\n"):
        chunk = s.recv(1024)
        if not chunk:
            break
        said += chunk
    return said[:3]


def test_eleven_connections_at_once_refuse_only_the_eleventh(listening: BounceListener) -> None:
    # All eleven connect before any is greeted: the listener accepts them in one go.
    held = [socket.create_connection(("127.0.0.1", listening.port)) for _ in range(11)]
    try:
        codes = sorted(greeting(s) for s in held)
    finally:
        for s in held:
            s.close()
    assert codes == [b"220"] * 10 + [b"421"]
    # Every slot is given back once they close.
    time.sleep(0.5)
    again = [smtplib.SMTP("127.0.0.1", listening.port, timeout=30) for _ in range(10)]
    for smtp in again:
        smtp.quit()


def test_a_message_to_many_of_our_addresses_is_kept_and_read_once(
    conn: Conn, listening: BounceListener
) -> None:
    _, bid = send_campaign(conn, "news", ["ada@example.com", "bob@example.com"])
    ada = jobs(conn, bid)["ada@example.com"]
    to = [PATH.address(KEY, bid, int(ada["subscriber_id"]))]
    to += [f"b+{n}@bounces.example.org" for n in range(12)]
    with smtplib.SMTP("127.0.0.1", listening.port, timeout=30) as smtp:
        smtp.ehlo()
        smtp.mail("<>")
        codes = [smtp.rcpt(address)[0] for address in to]
        assert codes == [250] * 10 + [452] * 3  # the transaction's cap
        code, said = smtp.data(DSN)
        assert code == 250, said
    [message] = rows(conn, "bounce_messages")
    assert str(message["envelope_to"]).count("@bounces.example.org") == 10
    # Its one signed return path names the job; the bounce is counted once.
    [finding] = rows(conn, "bounce_findings")
    assert (finding["broadcast_id"], finding["subscriber_id"]) == (bid, ada["subscriber_id"])
    assert count(conn, bid).bounced_later == 1


def many_blocks(n: int) -> bytes:
    head, _, rest = DSN.partition(b"Final-Recipient:")
    block, _, tail = (b"Final-Recipient:" + rest).partition(b"\r\n\r\n")
    blocks = b"\r\n\r\n".join(
        block.replace(b"ada@example.com", f"r{i}@example.com".encode()) for i in range(n)
    )
    return head + blocks + b"\r\n\r\n" + tail


def test_a_report_with_thousands_of_recipient_blocks_keeps_a_capped_few(
    conn: Conn, listening: BounceListener
) -> None:
    raw = many_blocks(5_000)
    started = time.monotonic()
    code, said = send(listening, "b@bounces.example.org", raw)
    assert code == 250, said
    assert time.monotonic() - started < 30
    assert len(rows(conn, "bounce_findings")) == MAX_FINDINGS
    [message] = rows(conn, "bounce_messages")
    assert f"{5_000 - MAX_FINDINGS} findings past the first {MAX_FINDINGS}" in str(message["why"])


def test_a_client_past_its_messages_a_minute_waits_for_the_next_minute(db_url: str) -> None:
    now = [1000.0]
    handler = store_in(db_url)
    handler.per_minute, handler.clock = 3, lambda: now[0]
    listener = BounceListener(handler, "127.0.0.1", free_port())
    listener.start()
    try:
        with smtplib.SMTP("127.0.0.1", listener.port, timeout=30) as smtp:
            for n in range(3):
                smtp.sendmail("", ["b@bounces.example.org"], DSN + f"{n}\r\n".encode())
            with pytest.raises(smtplib.SMTPSenderRefused) as refused:
                smtp.sendmail("", ["b@bounces.example.org"], DSN + b"3\r\n")
            assert refused.value.smtp_code == 451
            smtp.rset()
            now[0] += 61  # the minute has passed
            assert smtp.sendmail("", ["b@bounces.example.org"], DSN + b"4\r\n") == {}
    finally:
        listener.stop()
    with connect(db_url) as conn:
        assert len(rows(conn, "bounce_messages")) == 4


def test_raw_reports_are_purged_after_their_retention_and_their_findings_stay(
    conn: Conn, db_url: str
) -> None:
    _, bid = send_campaign(conn, "news", ["ada@example.com"])
    ada = jobs(conn, bid)["ada@example.com"]
    to = PATH.address(KEY, bid, int(ada["subscriber_id"]))
    old = receive(conn, "pipe", DSN, to, PATH, KEY)
    new = receive(conn, "pipe", DSN + b"\r\n", "b@bounces.example.org", PATH, KEY)
    conn.execute(
        "UPDATE bounce_messages SET received_at = now() - interval '31 days' WHERE id = %s",
        (old.id,),
    )

    async def one_pass() -> None:
        async with await AsyncConnection.connect(
            db_url, autocommit=True, row_factory=dict_row
        ) as aconn:
            await clean(aconn, 0, raw_days=30)

    asyncio.run(one_pass())
    kept = {r["id"]: r["raw"] for r in rows(conn, "bounce_messages")}
    assert kept[old.id] is None and kept[new.id] == DSN + b"\r\n"
    assert len(rows(conn, "bounce_findings")) == 2
    assert count(conn, bid).bounced_later == 1
    assert conn.execute("SELECT reason FROM suppressions").fetchall() == [{"reason": "bounce"}]
    # The same message again is still known by its digest: it changes nothing.
    again = receive(conn, "pipe", DSN, to, PATH, KEY)
    assert (again.new, again.id) == (False, old.id)


def test_bounces_serve_takes_its_per_minute_cap_from_the_setting(db_url: str) -> None:
    port = free_port()
    args = [sys.executable, "-m", "senddock", "bounces", "serve", "--port", str(port)]
    env = env_for(db_url, SENDDOCK_BOUNCE_PER_MINUTE="2")
    proc = subprocess.Popen(args, env=env, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: _listening(port), timeout=30)
        with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
            for n in range(2):
                smtp.sendmail("", ["b@bounces.example.org"], DSN + f"{n}\r\n".encode())
            code, said = smtp.mail("<>")
            assert code == 451, said
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
