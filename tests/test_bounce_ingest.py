"""`senddock bounces ingest`: a mail server's pipe into the bounce store (issue 21).

Run as the real command in a subprocess: exit 0 once the message is committed (the mail
server may drop it), 75 (EX_TEMPFAIL) when the database cannot take it (it keeps it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from senddock.bounces.verp import ReturnPath
from senddock.campaigns.compose import link_key
from senddock.config import Settings
from support import Conn, jobs, send_campaign, senddock, worker_env
from test_bounce_effects import report
from web_support import free_port

NO_SMTP = "smtp://127.0.0.1:9?tls=none"


def ingest(
    env: dict[str, str], *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "senddock", "bounces", "ingest", *args],
        env=env,
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_piped_dsn_is_recorded_once_and_suppresses(
    conn: Conn, db_url: str, tmp_path: Path
) -> None:
    cid, bid = send_campaign(conn, "news", ["ada@example.com"])
    job = jobs(conn, bid)["ada@example.com"]
    dsn = tmp_path / "dsn.eml"
    dsn.write_bytes(report("postfix-unknown-user", "ada@example.com", job["message_id"]))
    env = worker_env(db_url, NO_SMTP)
    first = ingest(env, str(dsn))
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "message 1 recorded: read, 1 of 1 matched"
    [message] = conn.execute("SELECT source, envelope_to, state FROM bounce_messages").fetchall()
    # The envelope recipient came from the message's own header (X-Original-To / To).
    assert (message["source"], message["state"]) == ("pipe", "read")
    reason = conn.execute("SELECT reason FROM suppressions WHERE email = 'ada@example.com'")
    assert reason.fetchone() == {"reason": "bounce"}
    again = ingest(env, "-", stdin=dsn.read_bytes())
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "message 1 already recorded: read"
    assert len(conn.execute("SELECT id FROM bounce_findings").fetchall()) == 1
    # `campaign status` shows it, in text and in --json (the same Counts).
    text = senddock(env, "campaign", "status", str(cid))
    assert (
        "  later: 1 bounced, 0 soft, 0 policy, 0 complaints (rate 0.00 %, Gmail's limit 0.3 %)"
        in (text.stdout.splitlines())
    ), text.stdout
    st = json.loads(senddock(env, "campaign", "status", str(cid), "--json").stdout)
    assert (st["bounced_later"], st["complaints"], st["complaint_rate"]) == (1, 0, 0.0)


def test_with_a_bounce_domain_the_signed_return_path_names_the_job(
    conn: Conn, db_url: str, tmp_path: Path
) -> None:
    _, bid = send_campaign(conn, "news", ["ada@example.com"])
    sid = int(jobs(conn, bid)["ada@example.com"]["subscriber_id"])
    path = ReturnPath.parse("bounces.example.org")
    to = path.address(link_key(conn, Settings(database_url=db_url)), bid, sid)
    dsn = tmp_path / "dsn.eml"
    dsn.write_bytes(report("postfix-unknown-user", "ada@example.com", "<other@mta.example>"))
    env = worker_env(db_url, NO_SMTP, SENDDOCK_BOUNCE_DOMAIN="bounces.example.org")
    got = ingest(env, "--recipient", to, str(dsn))
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip().endswith("1 of 1 matched")
    row = conn.execute("SELECT broadcast_id, subscriber_id FROM bounce_findings").fetchone()
    assert row == {"broadcast_id": bid, "subscriber_id": sid}


def test_an_unreachable_database_exits_75_in_one_line(tmp_path: Path) -> None:
    dsn = tmp_path / "dsn.eml"
    dsn.write_bytes(report("postfix-unknown-user", "ada@example.com", "<x@y.example>"))
    closed = f"postgresql://senddock@127.0.0.1:{free_port()}/senddock?connect_timeout=5"
    got = ingest(worker_env(closed, NO_SMTP), str(dsn))
    assert got.returncode == 75, (got.stdout, got.stderr)
    assert len(got.stderr.strip().splitlines()) == 1, got.stderr
    assert "Traceback" not in got.stderr and "database" in got.stderr
