"""A From (and Reply-To) names exactly one mailbox, at every entry point (issue 35.7): a
double opt-in list's From was stored as `News <news@…>, evil@attacker.test` and a
confirmation request went out from both. Refused by `lists set`, POST/PATCH /api/v1/lists,
the dashboard's list forms and every campaign path; nothing is changed by a refusal."""

from __future__ import annotations

import email
import email.policy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from senddock.audience.optin import Awaiting, request_message
from senddock.web import auth
from support import Conn, seed_list, senddock, worker_env
from test_dashboard import EMAIL, PASSWORD, logged_in
from web_support import Server, make_token, servers

NO_SMTP = "smtp://127.0.0.1:9?tls=none"
TWO = [
    "News <news@example.org>, evil@attacker.test",
    "News <news@example.org> evil@attacker.test",
    "News <news@example.org>;evil@attacker.test",
    "news@example.org <evil@attacker.test>",
    "team: news@example.org, evil@attacker.test;",
    "News <news@example.org>,",
]


def list_row(conn: Conn) -> dict[str, Any] | None:
    return conn.execute("SELECT double_opt_in, from_addr FROM lists WHERE name = 'news'").fetchone()


@pytest.mark.parametrize("value", TWO)
def test_lists_set_refuses_a_from_of_several_mailboxes_and_changes_nothing(
    value: str, db_url: str, conn: Conn
) -> None:
    seed_list(conn, "news", ["ada@example.org"])
    env = worker_env(db_url, NO_SMTP)
    proc = senddock(env, "lists", "set", "news", "--double-opt-in", "--from", value)
    assert proc.returncode != 0, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "from" in lines[0].lower(), proc.stderr
    assert list_row(conn) == {"double_opt_in": False, "from_addr": None}
    good = senddock(
        env, "lists", "set", "news", "--double-opt-in", "--from", "News <n@example.org>"
    )
    assert good.returncode == 0, good.stderr
    assert list_row(conn) == {"double_opt_in": True, "from_addr": "News <n@example.org>"}


@pytest.fixture(scope="module")
def shared(pg_url: str) -> Iterator[Server]:
    for started in servers(pg_url):
        yield started(workers=False)


def test_the_api_and_the_dashboard_refuse_a_from_of_several_mailboxes(
    shared: Server, db_url: str, conn: Conn
) -> None:
    seed_list(conn, "news", [])
    lid = conn.execute("SELECT id FROM lists WHERE name = 'news'").fetchone()
    assert lid is not None
    with shared.client(make_token(db_url)) as api:
        for value in TWO:
            made = api.post(
                "/api/v1/lists", json={"name": "other", "double_opt_in": True, "from_addr": value}
            )
            assert made.status_code == 422, (value, made.text)
            assert made.json()["error"]["field"] == "from_addr"
            patched = api.patch(
                f"/api/v1/lists/{lid['id']}", json={"double_opt_in": True, "from_addr": value}
            )
            assert patched.status_code == 422, (value, patched.text)
            assert patched.json()["error"]["field"] == "from_addr"
            campaign = api.post(
                "/api/v1/campaigns",
                json={
                    "name": "c",
                    "lists": ["news"],
                    "subject": "s",
                    "from_addr": value,
                    "text_body": "hi",
                },
            )
            assert campaign.status_code == 422, (value, campaign.text)
            replied = api.post(
                "/api/v1/campaigns",
                json={
                    "name": "c",
                    "lists": ["news"],
                    "subject": "s",
                    "from_addr": "news@example.org",
                    "reply_to": value,
                    "text_body": "hi",
                },
            )
            assert replied.status_code == 422, (value, replied.text)
    auth.create_admin(conn, EMAIL, PASSWORD)
    with logged_in(shared) as (http, csrf):
        for value in TWO[:2]:
            form = {"csrf": csrf, "name": "news", "double_opt_in": "on", "from_addr": value}
            page = http.post(f"/lists/{lid['id']}", data=form)
            assert page.status_code == 422, page.text
            assert "several addresses" in page.text
            made = http.post("/lists/new", data={**form, "name": "fresh"})
            assert made.status_code == 422, made.text
    assert conn.execute("SELECT name FROM lists ORDER BY name").fetchall() == [{"name": "news"}]
    assert list_row(conn) == {"double_opt_in": False, "from_addr": None}
    assert conn.execute("SELECT count(*) AS n FROM campaigns").fetchone() == {"n": 0}


@pytest.mark.parametrize("value", TWO[:3])
def test_campaign_create_refuses_a_from_or_reply_to_of_several_mailboxes(
    value: str, db_url: str, conn: Conn, tmp_path: Path
) -> None:
    seed_list(conn, "news", ["ada@example.org"])
    text = tmp_path / "t.txt"
    text.write_text("Hi\n", encoding="utf-8")
    env = worker_env(db_url, NO_SMTP)
    base = ("campaign", "create", "--name", "N", "--list", "news", "--subject", "S")
    for extra in (("--from", value), ("--from", "news@example.org", "--reply-to", value)):
        proc = senddock(env, *base, *extra, "--text-file", str(text))
        assert proc.returncode != 0, proc.stdout
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert conn.execute("SELECT count(*) AS n FROM campaigns").fetchone() == {"n": 0}


def test_a_from_stored_before_the_check_sends_from_its_first_mailbox_only() -> None:
    row = Awaiting(
        subscriber_id=1,
        email="ada@example.org",
        name="Ada",
        list_id=1,
        list_name="news",
        from_addr="News <news@example.org>, evil@attacker.test",
    )
    data = request_message(row, "https://example.org/confirm/x")
    msg = email.message_from_bytes(data, policy=email.policy.default)
    assert msg["From"] == "News <news@example.org>"
    assert b"attacker" not in data
