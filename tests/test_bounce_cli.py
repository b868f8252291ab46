"""`senddock bounces ingest|serve|list` as a mail transport runs them (issue 21, item 3)."""

from __future__ import annotations

import json
import os
import signal
import smtplib
import subprocess
import sys
from pathlib import Path

from senddock.bounces.verp import ReturnPath
from senddock.campaigns import compose
from senddock.config import Settings
from senddock.queue.counts import count
from support import Conn, jobs, send_campaign, senddock, wait_until, worker_env
from test_bounce_listener import dsn_for
from web_support import free_port

HERE = Path(__file__).parent / "bounces"
DOMAIN = "bounces.example.org"


def env_for(db_url: str, **extra: str) -> dict[str, str]:
    return worker_env(db_url, "smtp://127.0.0.1:1?tls=none", SENDDOCK_BOUNCE_DOMAIN=DOMAIN, **extra)


def verp(conn: Conn, db_url: str, bid: int, job: dict[str, object]) -> str:
    key = compose.link_key(conn, Settings(database_url=db_url))
    return ReturnPath.parse(DOMAIN).address(key, bid, int(str(job["subscriber_id"])))


def ingest(env: dict[str, str], raw: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "senddock", "bounces", "ingest", *args],
        input=raw,
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_ingest_records_once_applies_and_says_so_also_the_second_time(
    conn: Conn, db_url: str
) -> None:
    _, bid = send_campaign(conn, "news", ["ada@example.com", "bob@example.com"])
    to = verp(conn, db_url, bid, jobs(conn, bid)["ada@example.com"])
    raw = (HERE / "postfix-unknown-user.eml").read_bytes()
    env = env_for(db_url)
    first = ingest(env, raw, "--recipient", to)
    assert first.returncode == 0, first.stderr
    assert b"recorded: read, 1 of 1 matched" in first.stdout
    again = ingest(env, raw, "--recipient", to)
    assert again.returncode == 0 and b"already recorded" in again.stdout
    row = conn.execute("SELECT reason FROM suppressions WHERE email = 'ada@example.com'")
    assert row.fetchone() == {"reason": "bounce"}
    assert count(conn, bid).bounced_later == 1
    # The envelope recipient from the delivering MTA's header, when no --recipient.
    headed = f"X-Original-To: {verp(conn, db_url, bid, jobs(conn, bid)['bob@example.com'])}\r\n"
    third = ingest(env, headed.encode() + (HERE / "gmail-no-such-account.eml").read_bytes())
    assert third.returncode == 0 and b"1 of 1 matched" in third.stdout
    assert count(conn, bid).bounced_later == 2
    # And `bounces list` shows them, with an unmatched one as such.
    assert ingest(env, (HERE / "mailbox-full.eml").read_bytes()).returncode == 0
    listed = senddock(env, "bounces", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert sorted((r["kind"], r["broadcast_id"] is not None) for r in rows) == [
        ("hard", True),
        ("hard", True),
        ("soft", False),
    ]
    text = senddock(env, "bounces", "list", "--kind", "soft").stdout
    assert "unmatched" in text and "erin@example.net" in text


def test_ingest_with_the_database_down_exits_75_in_one_line(db_url: str) -> None:
    env = env_for(db_url, SENDDOCK_DATABASE_URL=f"postgresql://127.0.0.1:{free_port()}/none")
    done = ingest(env, (HERE / "postfix-unknown-user.eml").read_bytes(), "--recipient", "x@y.z")
    assert done.returncode == 75
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "cannot reach the database" in lines[0], done.stderr


def test_serve_takes_a_dsn_for_a_return_path_and_ends_on_sigterm(conn: Conn, db_url: str) -> None:
    _, bid = send_campaign(conn, "news", ["ada@example.com"])
    to = verp(conn, db_url, bid, jobs(conn, bid)["ada@example.com"])
    port = free_port()
    args = [sys.executable, "-m", "senddock", "bounces", "serve", "--port", str(port)]
    proc = subprocess.Popen(args, env=env_for(db_url), stderr=subprocess.PIPE)
    try:
        assert wait_until(lambda: _listening(port), timeout=30)
        with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
            raw = dsn_for("ada@example.com", "<none@example.org>")
            assert smtp.sendmail("", [to], raw) == {}
        assert count(conn, bid).bounced_later == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def _listening(port: int) -> bool:
    try:
        with smtplib.SMTP("127.0.0.1", port, timeout=2):
            return True
    except OSError:
        return False
