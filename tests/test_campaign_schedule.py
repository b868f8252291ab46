"""Scheduling and test sends: due campaigns enqueued exactly once however many schedulers run;
`campaign test` sends the rendered message without a broadcast."""

from __future__ import annotations

import email
import email.policy
import socket
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from senddock.campaigns import CampaignError, create_campaign, run_due, schedule, status
from senddock.testing import Catcher
from support import Conn, ThreadWorker, db, seed_list, senddock, wait_until, worker_env


def campaign(conn: Conn, name: str, send_at: datetime | None, list_name: str = "news") -> int:
    return create_campaign(
        conn,
        name=name,
        list_name=list_name,
        subject="Hi {{ subscriber.name }}",
        from_addr="News <news@example.org>",
        text_body="Hello {{ subscriber.name }}\n",
        send_at=send_at,
    )


def test_several_schedulers_at_once_enqueue_each_due_campaign_exactly_once(
    db_url: str, conn: Conn
) -> None:
    seed_list(conn, "news", ["ada@example.com", "bob@example.com"])
    past = datetime.now(UTC) - timedelta(minutes=1)
    due = [campaign(conn, f"due {i}", past) for i in range(8)]
    later = campaign(conn, "later", datetime.now(UTC) + timedelta(hours=1))
    unscheduled = campaign(conn, "draft", None)

    schedulers = [db(db_url) for _ in range(4)]
    start = threading.Barrier(len(schedulers))
    enqueued: list[list[int]] = [[] for _ in schedulers]

    def run(i: int) -> None:
        start.wait()
        for _ in range(5):
            enqueued[i].extend(run_due(schedulers[i], limit=3))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(schedulers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for c in schedulers:
        c.close()
    everything = [cid for ids in enqueued for cid in ids]
    assert sorted(everything) == sorted(due), enqueued  # each exactly once
    rows = conn.execute(
        "SELECT campaign_id, count(*) AS n, sum(total) AS total FROM broadcasts"
        " GROUP BY campaign_id"
    ).fetchall()
    assert {r["campaign_id"]: (r["n"], r["total"]) for r in rows} == {c: (1, 2) for c in due}
    assert status(conn, later).status == "draft"
    assert status(conn, unscheduled).status == "draft"


def test_a_due_campaign_with_nobody_to_send_to_is_unscheduled_with_the_reason(
    conn: Conn,
) -> None:
    seed_list(conn, "empty", [])
    cid = campaign(conn, "empty", datetime.now(UTC) - timedelta(seconds=1), "empty")
    assert run_due(conn) == []
    row = conn.execute(
        "SELECT status, send_at, schedule_error FROM campaigns WHERE id = %s", (cid,)
    ).fetchone()
    assert row is not None
    assert (row["status"], row["send_at"]) == ("draft", None)
    assert "no confirmed" in str(row["schedule_error"])
    assert run_due(conn) == []  # not tried again and again


def test_schedule_needs_a_draft_and_a_time_zone(conn: Conn) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    cid = campaign(conn, "c", None)
    with pytest.raises(CampaignError, match="time zone"):
        schedule(conn, cid, datetime(2030, 1, 1, 9, 0))
    schedule(conn, cid, datetime(2030, 1, 1, 9, 0, tzinfo=UTC))
    assert run_due(conn) == []
    schedule(conn, cid, datetime.now(UTC) - timedelta(seconds=1))
    assert run_due(conn) == [cid]
    with pytest.raises(CampaignError, match="only drafts"):
        schedule(conn, cid, datetime.now(UTC))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_runs_the_scheduler_and_a_due_campaign_is_sent(
    db_url: str, conn: Conn, catcher: Catcher, tmp_path: Path
) -> None:
    seed_list(conn, "news", ["ada@example.com", "bob@example.com"])
    env = worker_env(db_url, catcher.url)
    text = tmp_path / "t.txt"
    text.write_text("Hello {{ subscriber.name }}\n", encoding="utf-8")
    base = ["campaign", "create", "--list", "news", "--subject", "s", "--text-file", str(text)]
    base += ["--from", "news@example.org"]
    # Ahead of the command's start on a loaded machine: a time in the past is refused.
    soon = (datetime.now(UTC) + timedelta(seconds=5)).isoformat()
    made = senddock(env, *base, "--name", "soon", "--send-at", soon)
    assert made.returncode == 0, made.stderr
    due = int(made.stdout)
    later = int(senddock(env, *base, "--name", "later", "--send-at", "2099-01-01T09:00").stdout)

    log = (tmp_path / "serve.log").open("wb")
    port = str(free_port())
    serve = subprocess.Popen(
        [sys.executable, "-m", "senddock", "serve", "--port", port, "--schedule-every", "0.2"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        with ThreadWorker(db_url, catcher.url):
            assert wait_until(lambda: status(conn, due).status == "sent", timeout=60)
    finally:
        serve.terminate()
        serve.wait(15)
        log.close()
    assert catcher.delivered_once(["ada@example.com", "bob@example.com"])
    assert status(conn, later).status == "draft"
    row = conn.execute("SELECT send_at FROM campaigns WHERE id = %s", (later,)).fetchone()
    assert row is not None and row["send_at"].year == 2099


def test_campaign_test_sends_the_rendered_message_without_a_broadcast(
    db_url: str, conn: Conn, catcher: Catcher
) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    conn.execute("UPDATE subscribers SET name = 'Ada' WHERE email = 'ada@example.com'")
    cid = campaign(conn, "c", None)
    env = worker_env(db_url, catcher.url, SENDDOCK_PUBLIC_URL="https://news.example.org")
    proc = senddock(
        env, "campaign", "test", str(cid), "--to", "ada@example.com", "--to", "qa@example.net"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(": sent") == 2
    got = {
        r.rcpt: email.message_from_bytes(r.data, policy=email.policy.default)
        for r in catcher.received()
    }
    assert set(got) == {"ada@example.com", "qa@example.net"}
    assert got["ada@example.com"]["Subject"] == "Hi Ada"
    # Not a subscriber: rendered as the first of the audience, not a blank one (issue 35).
    assert got["qa@example.net"]["Subject"] == "Hi Ada"
    assert str(got["ada@example.com"]["Message-ID"]).startswith(f"<test.{cid}.")
    assert got["ada@example.com"]["List-Unsubscribe"] is not None
    # No broadcast, no job rows: the campaign is still a draft.
    assert status(conn, cid).status == "draft"
    assert conn.execute("SELECT count(*) AS n FROM broadcast_jobs").fetchone() == {"n": 0}

    bounced = senddock(env, "campaign", "test", str(cid), "--to", "bounce-x@example.com")
    assert bounced.returncode != 0
    assert "NOT sent" in bounced.stdout and "550" in bounced.stdout
    assert len(bounced.stderr.strip().splitlines()) == 1
    # A test send suppresses nobody.
    assert conn.execute("SELECT count(*) AS n FROM suppressions").fetchone() == {"n": 0}
