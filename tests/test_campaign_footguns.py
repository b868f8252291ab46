"""First-day foot-guns of the campaign commands, through the real command line and API.

Each test is named for the promise it checks; each failed before its fix (see the commits).
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from senddock import queue
from senddock.campaigns import status
from senddock.testing import Catcher
from support import (
    Conn,
    ThreadWorker,
    paced,
    seed_list,
    senddock,
    server_older_than_a_lease,
    wait_until,
    worker_env,
)
from web_support import Server, ServerFactory, make_token, servers

NO_SMTP = "smtp://127.0.0.1:9?tls=none"
FROM = "News <news@example.org>"
PAST = "2020-01-01T09:00:00+00:00"


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def one_line_error(proc: subprocess.CompletedProcess[str], *mentions: str) -> str:
    """Non-zero exit, one stderr line naming `mentions`, no traceback, no internal error."""
    assert proc.returncode != 0, f"expected a failure, got exit 0\nstdout: {proc.stdout}"
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected ONE line on stderr, got {len(lines)}:\n{proc.stderr}"
    assert "internal error" not in lines[0], lines[0]
    for word in mentions:
        assert word.lower() in lines[0].lower(), f"{word!r} not in {lines[0]!r}"
    return lines[0]


@pytest.fixture
def env(db_url: str) -> dict[str, str]:
    return worker_env(db_url, NO_SMTP)


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    yield from servers(db_url)


def create(
    env: dict[str, str], tmp_path: Path, *extra: str, text: str = "Hi {{ subscriber.name }}\n"
) -> subprocess.CompletedProcess[str]:
    body = tmp_path / "body.txt"
    body.write_text(text, encoding="utf-8")
    fields = ["--name", "Spring", "--list", "news", "--subject", "Hello", "--from", FROM]
    return senddock(env, "campaign", "create", *fields, "--text-file", str(body), *extra)


def created(env: dict[str, str], tmp_path: Path, *extra: str, **kw: str) -> int:
    return int(ok(create(env, tmp_path, *extra, **kw)).stdout)


def campaigns_count(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) AS n FROM campaigns").fetchone()
    assert row is not None
    return int(row["n"])


def api(server: Server, db_url: str) -> Any:
    return server.client(make_token(db_url))


# -- 1. a send time in the past ------------------------------------------------------------


def test_a_send_time_in_the_past_is_refused_rather_than_sent_at_once(
    env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    cid = created(env, tmp_path)
    line = one_line_error(senddock(env, "campaign", "schedule", str(cid), PAST), "past")
    assert "campaign send" in line
    row = conn.execute("SELECT status, send_at FROM campaigns WHERE id = %s", (cid,)).fetchone()
    assert row == {"status": "draft", "send_at": None}

    one_line_error(create(env, tmp_path, "--send-at", PAST), "past", "campaign send")
    one_line_error(create(env, tmp_path, "--send-at", ""), "send-at")
    for bad in ("0001-01-01T00:00", "0001-01-01T00:00+05:00", "tomorrow at nine"):
        one_line_error(create(env, tmp_path, "--send-at", bad))
        one_line_error(senddock(env, "campaign", "schedule", str(cid), bad))
    assert campaigns_count(conn) == 1  # none of those made a campaign
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    assert created(env, tmp_path, "--send-at", later) > cid


def test_the_api_refuses_a_send_time_in_the_past_naming_the_field(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    body = {
        "name": "Spring",
        "lists": ["news"],
        "subject": "Hello",
        "from_addr": FROM,
        "text_body": "Hi\n",
    }
    with api(serve(workers=False), db_url) as c:
        refused = c.post("/api/v1/campaigns", json={**body, "send_at": PAST})
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["field"] == "send_at"
        assert "past" in refused.json()["error"]["message"]
        assert campaigns_count(conn) == 0
        cid = c.post("/api/v1/campaigns", json=body).json()["id"]
        late = c.post(f"/api/v1/campaigns/{cid}/schedule", json={"at": PAST})
        assert late.status_code == 422 and late.json()["error"]["field"] == "at", late.text
        assert status(conn, cid).status == "draft"


# -- 2. cancel says what it cancelled ------------------------------------------------------


def test_cancel_counts_the_jobs_claimed_but_not_started_as_cancelled(
    db_url: str, conn: Conn, tmp_path: Path
) -> None:
    emails = [f"r{n}@example.com" for n in range(400)]
    seed_list(conn, "news", emails)
    with paced(0.1) as relay:
        env = worker_env(db_url, relay.url)
        cid = created(env, tmp_path)
        ok(senddock(env, "campaign", "send", str(cid)))
        with ThreadWorker(db_url, relay.url, concurrency=2):
            # Senders hold whole batches: one message in flight each, the rest claimed.
            assert wait_until(
                lambda: status(conn, cid).counts.sending > 20 and relay.received_count() >= 2
            )
            out = ok(senddock(env, "campaign", "cancel", str(cid))).stdout
            assert wait_until(lambda: status(conn, cid).counts.sending == 0, 30)
        final = status(conn, cid)
    said = re.search(r"(\d+) messages? will not be sent", out)
    assert said, out
    assert int(said.group(1)) == final.counts.cancelled, (out, final)
    assert final.counts.sent + final.counts.cancelled == final.counts.total == 400
    assert "in flight" in out, out


# -- 3. status of a cancelled campaign -----------------------------------------------------


def test_status_of_a_cancelled_campaign_says_cancelled_with_sent_and_cancelled_counts(
    env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    seed_list(conn, "news", [f"r{n}@example.com" for n in range(10)])
    cid = created(env, tmp_path)
    ok(senddock(env, "campaign", "send", str(cid)))
    bid = status(conn, cid).broadcast_id
    conn.execute(
        "UPDATE broadcast_jobs SET status = 'sent', sent_at = now() WHERE id IN"
        " (SELECT id FROM broadcast_jobs WHERE broadcast_id = %s ORDER BY id LIMIT 3)",
        (bid,),
    )
    ok(senddock(env, "campaign", "cancel", str(cid)))
    out = ok(senddock(env, "campaign", "status", str(cid))).stdout
    head = out.splitlines()[0]
    assert "cancelled" in head, out
    assert re.search(r"\b3 sent\b", head) and re.search(r"\b7 cancelled\b", head), out
    assert "100" not in out and "done" not in out, out


# -- 4. send of a cancelled campaign -------------------------------------------------------


def test_send_of_a_cancelled_campaign_says_cancelled_and_fails(
    env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    seed_list(conn, "news", ["ada@example.com", "bob@example.com"])
    cid = created(env, tmp_path)
    ok(senddock(env, "campaign", "send", str(cid)))
    ok(senddock(env, "campaign", "cancel", str(cid)))
    line = one_line_error(senddock(env, "campaign", "send", str(cid)), "cancelled", str(cid))
    assert "already sent" not in line
    draft = created(env, tmp_path)
    ok(senddock(env, "campaign", "cancel", str(draft)))
    one_line_error(senddock(env, "campaign", "send", str(draft)), "cancelled")
    assert status(conn, cid).counts.cancelled == 2
    row = conn.execute("SELECT count(*) AS n FROM broadcasts").fetchone()
    assert row == {"n": 1}


def test_the_api_answers_409_to_sending_a_cancelled_campaign(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    body = {"name": "S", "lists": ["news"], "subject": "H", "from_addr": FROM, "text_body": "x"}
    with api(serve(workers=False), db_url) as c:
        cid = c.post("/api/v1/campaigns", json=body).json()["id"]
        assert c.post(f"/api/v1/campaigns/{cid}/send").status_code == 202
        assert c.post(f"/api/v1/campaigns/{cid}/cancel").status_code == 200
        again = c.post(f"/api/v1/campaigns/{cid}/send")
        assert again.status_code == 409, again.text
        assert "cancelled" in again.json()["error"]["message"]


# -- 5. send with no worker running --------------------------------------------------------


def test_send_with_no_live_worker_warns_that_nothing_will_be_sent(
    db_url: str, env: dict[str, str], conn: Conn, tmp_path: Path, catcher: Catcher
) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    first, second = created(env, tmp_path), created(env, tmp_path)
    # A worker that died without deregistering: its row is there, its heartbeat is old.
    server_older_than_a_lease(conn)  # only then is it dead
    conn.execute(
        "INSERT INTO workers (host, boot_id, pid, pid_started, concurrency, heartbeat_at)"
        " VALUES ('gone', '', 1, '', 5, now() - interval '1 hour')"
    )
    proc = ok(senddock(env, "campaign", "send", str(first)))
    assert "no worker is running" in proc.stderr and "senddock worker" in proc.stderr
    assert "started" in proc.stdout
    with ThreadWorker(db_url, catcher.url):
        assert wait_until(lambda: status(conn, first).status == "sent")
        quiet = ok(senddock(worker_env(db_url, catcher.url), "campaign", "send", str(second)))
    assert "worker" not in quiet.stderr, quiet.stderr


def test_the_api_send_reports_live_workers_and_warns_when_there_are_none(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    body = {"name": "S", "lists": ["news"], "subject": "H", "from_addr": FROM, "text_body": "x"}
    with api(serve(workers=False), db_url) as c:
        cid = c.post("/api/v1/campaigns", json=body).json()["id"]
        sent = c.post(f"/api/v1/campaigns/{cid}/send")
        assert sent.status_code == 202, sent.text
        assert sent.json()["workers_live"] == 0
        assert "no worker is running" in sent.json()["warning"]


# -- 6. reasons, schedule and --watch in status; reasons in recipients ---------------------


def test_recipients_and_status_show_the_reason_of_a_failure_with_no_smtp_code(
    db_url: str, env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    seed_list(conn, "news", ["ada@example.com", "bob@example.com", "cy@example.com"])
    cid = created(env, tmp_path)
    ok(senddock(env, "campaign", "send", str(cid)))
    with ThreadWorker(db_url, NO_SMTP):  # nothing listens: connection refused, no code
        assert wait_until(lambda: status(conn, cid).counts.retry > 0, 30)
    rows = ok(senddock(env, "campaign", "recipients", str(cid))).stdout
    tried = conn.execute(
        "SELECT email, last_stage, last_reply FROM broadcast_jobs WHERE status = 'retry'"
    ).fetchall()
    assert tried and all(t["last_reply"] for t in tried), tried
    by_address = {line.split()[0]: line for line in rows.splitlines()}
    for t in tried:
        line = by_address[t["email"]]
        assert " ".join(t["last_reply"].split()) in line and t["last_stage"] in line, line

    # A worker that died mid-attempt: its jobs are rescued with the reason and no code.
    bid = status(conn, cid).broadcast_id
    conn.execute(
        "UPDATE broadcast_jobs SET status = 'sending', owner = 4242, attempts = 1"
        " WHERE broadcast_id = %s AND email = 'ada@example.com'",
        (bid,),
    )

    async def rescue() -> int:
        aconn = await queue_conn(db_url)
        async with aconn:
            return await queue.rescue(aconn, [4242])

    assert asyncio.run(rescue()) == 1
    out = ok(senddock(env, "campaign", "status", str(cid))).stdout
    assert "worker 4242 died" in out, out
    rows = ok(senddock(env, "campaign", "recipients", str(cid))).stdout
    assert re.search(r"ada@example.com .*worker 4242 died", rows), rows


async def queue_conn(url: str) -> Any:
    import psycopg
    from psycopg.rows import dict_row

    return await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row)


def test_status_shows_when_a_scheduled_campaign_will_be_sent(
    env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    cid = created(env, tmp_path, "--send-at", "2099-01-01T09:00:00+00:00")
    out = ok(senddock(env, "campaign", "status", str(cid))).stdout
    assert "scheduled" in out and "2099-01-01" in out, out
    js = json.loads(ok(senddock(env, "campaign", "status", str(cid), "--json")).stdout)
    assert js["send_at"].startswith("2099-01-01"), js


def test_status_watch_ends_with_the_final_counts_once_the_campaign_is_finished(
    db_url: str, conn: Conn, catcher: Catcher, tmp_path: Path
) -> None:
    seed_list(conn, "news", ["ada@example.com", "bob@example.com"])
    env = worker_env(db_url, catcher.url)
    cid = created(env, tmp_path)
    ok(senddock(env, "campaign", "send", str(cid)))
    with ThreadWorker(db_url, catcher.url):
        assert wait_until(lambda: status(conn, cid).status == "sent")
    proc = ok(senddock(env, "campaign", "status", str(cid), "--watch", timeout=30))
    assert "sent" in proc.stdout and re.search(r"\bsent\s+2\b", proc.stdout), proc.stdout


# -- 7. list and show ----------------------------------------------------------------------


def test_campaign_list_and_show_give_every_campaign_and_every_field(
    env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    seed_list(conn, "news", ["ada@example.com", "bob@example.com"])
    seed_list(conn, "vip", ["cy@example.com"])
    first = created(env, tmp_path, "--reply-to", "Ada <ada@example.org>", "--list", "vip")
    second = created(env, tmp_path, "--send-at", "2099-01-01T09:00:00+00:00")
    ok(senddock(env, "campaign", "send", str(first)))

    listed = ok(senddock(env, "campaign", "list")).stdout.splitlines()
    assert len(listed) == 3, listed  # a header and two campaigns, newest first
    assert listed[1].split()[0] == str(second) and "draft" in listed[1]
    assert listed[2].split()[0] == str(first) and "sending" in listed[2]
    rows = json.loads(ok(senddock(env, "campaign", "list", "--json")).stdout)
    assert [r["id"] for r in rows] == [second, first]
    assert rows[1]["total"] == 3 and rows[1]["name"] == "Spring"

    shown = ok(senddock(env, "campaign", "show", str(first))).stdout
    for part in ("Hello", FROM, "Ada <ada@example.org>", "news", "vip", "sending"):
        assert part in shown, (part, shown)
    assert re.search(r"text body\s+\d+ bytes", shown), shown
    data = json.loads(ok(senddock(env, "campaign", "show", str(second), "--json")).stdout)
    assert data["lists"] == ["news"] and data["send_at"].startswith("2099-01-01")
    assert data["text_bytes"] == len(b"Hi {{ subscriber.name }}\n") and data["html_bytes"] == 0
    one_line_error(senddock(env, "campaign", "show", "4242"), "4242")


# -- 8. preview for someone who is not a recipient -----------------------------------------


def test_preview_for_an_address_not_on_the_campaigns_lists_is_refused(
    env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    seed_list(conn, "other", ["bob@example.com"])
    cid = created(env, tmp_path)
    assert (
        "Name 1"
        in ok(senddock(env, "campaign", "preview", str(cid), "--to", "ADA@example.com")).stdout
    )
    for stranger in ("nobody@example.com", "bob@example.com"):
        one_line_error(
            senddock(env, "campaign", "preview", str(cid), "--to", stranger),
            stranger,
            "subscriber",
            "(news)",
        )


def test_the_api_refuses_a_preview_for_an_address_not_on_the_lists_naming_the_field(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    body = {"name": "S", "lists": ["news"], "subject": "H", "from_addr": FROM, "text_body": "x"}
    with api(serve(workers=False), db_url) as c:
        cid = c.post("/api/v1/campaigns", json=body).json()["id"]
        url = f"/api/v1/campaigns/{cid}/preview"
        assert c.get(url, params={"to": "ada@example.com"}).status_code == 200
        refused = c.get(url, params={"to": "nobody@example.com"})
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["field"] == "to"


# -- 9. template names checked at create ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "undefined"),
    [
        ("Hi {{ subscriber.nmae }}\n", "nmae"),
        ("Hi\n\nleave: {{ unsubscribe_ur }}\n", "unsubscribe_ur"),
        ("{% if subscriber.emial %}x{% endif %}\n", "emial"),
    ],
)
def test_create_refuses_a_misspelt_name_in_a_template_naming_part_line_and_name(
    text: str, undefined: str, env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    line = one_line_error(create(env, tmp_path, text=text), "text", undefined)
    assert f"line {text.count(chr(10), 0, text.index(undefined)) + 1}" in line, line
    seed_list(conn, "empty", [])
    body = tmp_path / "b.txt"
    body.write_text(text, encoding="utf-8")
    nobody = senddock(
        env, "campaign", "create", "--name", "N", "--list", "empty", "--subject", "S",
        "--from", FROM, "--text-file", str(body),
    )  # fmt: skip
    one_line_error(nobody, undefined)
    assert campaigns_count(conn) == 0


def test_create_checks_templates_against_real_subscribers_and_allows_a_missing_attribute(
    env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    seed_list(conn, "news", ["ada@example.com", "bob@example.com"])
    conn.execute(
        "UPDATE subscribers SET attributes = '{\"city\": \"Oslo\"}' WHERE email = 'ada@example.com'"
    )
    created(env, tmp_path, text="From {{ subscriber.attributes.city }} {{ attributes.zip }}\n")
    # What the sample subscriber lacked no longer refuses a campaign (bob has no city: his job
    # renders it empty; a subscriber whose data a template cannot take fails alone at send).
    created(env, tmp_path, text="{{ subscriber.attributes.city.upper() }}\n")
    created(env, tmp_path, text="{{ subscriber.attributes.plan.price }}\n")
    subject = senddock(
        env, "campaign", "create", "--name", "N", "--list", "news", "--subject",
        "Hi {{ subscriber.fullname }}", "--from", FROM, "--text-file", str(tmp_path / "body.txt"),
    )  # fmt: skip
    one_line_error(subject, "subject", "fullname")


def test_the_api_refuses_a_misspelt_template_name_at_create(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    body = {
        "name": "S",
        "lists": ["news"],
        "subject": "H",
        "from_addr": FROM,
        "text_body": "Hi {{ subscriber.nmae }}",
    }
    with api(serve(workers=False), db_url) as c:
        refused = c.post("/api/v1/campaigns", json=body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["field"] == "text_body"
        assert "nmae" in refused.json()["error"]["message"]
    assert campaigns_count(conn) == 0


# -- singular and plural -------------------------------------------------------------------


def test_messages_about_one_recipient_say_recipient(
    env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    cid = created(env, tmp_path)
    sent = ok(senddock(env, "campaign", "send", str(cid)))
    assert "1 recipient " in sent.stdout or "1 recipient)" in sent.stdout, sent.stdout
    assert "1 recipients" not in sent.stdout + sent.stderr
    cancelled = ok(senddock(env, "campaign", "cancel", str(cid))).stdout
    assert "1 message will not be sent" in cancelled, cancelled


@pytest.mark.parametrize(
    "two", ["a@example.org, b@example.org", "News <a@example.org>, Other <b@example.org>"]
)
def test_the_command_line_refuses_a_from_with_two_addresses_and_keeps_one_with_a_comma(
    env: dict[str, str], conn: Conn, tmp_path: Path, two: str
) -> None:
    # The first address alone was stored and sent from; the second vanished unsaid.
    seed_list(conn, "news", ["ada@example.com"])
    body = tmp_path / "b.txt"
    body.write_text("Hello\n", encoding="utf-8")
    fields = ["--name", "N", "--list", "news", "--subject", "S", "--text-file", str(body)]
    one_line_error(senddock(env, "campaign", "create", *fields, "--from", two), "several")
    one_line_error(senddock(env, "campaign", "create", *fields, "--from", FROM, "--reply-to", two))
    assert campaigns_count(conn) == 0
    ok(senddock(env, "campaign", "create", *fields, "--from", '"Doe, J" <j@example.org>'))
    assert campaigns_count(conn) == 1
