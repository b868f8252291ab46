"""Lists are created and deleted on every surface (issue 35 item 4): `senddock lists create`,
`senddock lists delete`, DELETE /api/v1/lists/{id} and the button on a list's page. A list that
a campaign still to send names is refused (409) and stays whole; deleting one takes its
memberships and leaves its subscribers, and sent or cancelled campaigns keep their counts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from senddock import campaigns
from senddock.audience import signup
from senddock.audience.lists import ensure_list
from senddock.campaigns import edits
from senddock.queue.counts import count
from senddock.web import auth
from support import Conn, new_campaign, seed_list, send_campaign, senddock, worker_env
from test_dashboard import EMAIL, PASSWORD, logged_in
from web_support import ServerFactory, make_token, servers

PEOPLE = ["ada@example.com", "bob@example.com"]


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    yield from servers(db_url)


def scalar(conn: Conn, query: str, *params: object) -> int:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return int(next(iter(row.values())))


def test_cli_creates_a_list_and_deletes_it_once_no_campaign_to_send_names_it(
    conn: Conn, db_url: str
) -> None:
    env = worker_env(db_url, "smtp://127.0.0.1:1")
    made = senddock(env, "lists", "create", "news", "--description", "Weekly", "--public")
    assert made.returncode == 0, made.stderr
    row = conn.execute("SELECT id, description, public FROM lists WHERE name = 'news'").fetchone()
    assert row == {"id": int(made.stdout), "description": "Weekly", "public": True}
    again = senddock(env, "lists", "create", "news")
    assert again.returncode != 0 and "already is a list named 'news'" in again.stderr

    seed_list(conn, "news", PEOPLE)
    draft = new_campaign(conn, "news", "June")
    refused = senddock(env, "lists", "delete", "news", "--yes")
    assert refused.returncode != 0
    assert f"{draft} 'June' (draft)" in refused.stderr
    assert scalar(conn, "SELECT count(*) FROM list_memberships") == 2

    edits.delete(conn, draft)
    asked = senddock(env, "lists", "delete", "news")  # nobody answers the question: refused
    assert asked.returncode != 0
    assert scalar(conn, "SELECT count(*) FROM lists WHERE name = 'news'") == 1
    done = senddock(env, "lists", "delete", "news", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "list 'news' deleted with its 2 memberships"
    assert scalar(conn, "SELECT count(*) FROM lists") == 0
    assert scalar(conn, "SELECT count(*) FROM list_memberships") == 0
    assert scalar(conn, "SELECT count(*) FROM subscribers") == 2


def test_api_and_dashboard_refuse_while_sending_and_delete_after_the_cancel(
    conn: Conn, db_url: str, serve: ServerFactory
) -> None:
    news = ensure_list(conn, "news")
    signup.set_public(conn, news, True)
    signup.sign_up(
        conn,
        signup.PublicList(news, "news", False, signup.DEFAULT_CONSENT),
        "zoe@example.com",
        "",
        "::1",
        "",
    )
    cid, bid = send_campaign(conn, "news", PEOPLE)  # sending: jobs pending, no worker
    other = ensure_list(conn, "other")
    auth.create_admin(conn, EMAIL, PASSWORD)
    server = serve(workers=False)
    with server.client(make_token(db_url)) as api:
        refused = api.delete(f"/api/v1/lists/{news}")
        assert refused.status_code == 409, refused.text
        assert f"{cid} 'c' (sending)" in refused.json()["error"]["message"]
        assert scalar(conn, "SELECT count(*) FROM list_memberships WHERE list_id = %s", news) == 3
        with logged_in(server) as (http, csrf):
            button = http.post(f"/lists/{news}/delete", data={"csrf": csrf}, follow_redirects=True)
            assert button.status_code == 200 and "still to send" in button.text
            assert scalar(conn, "SELECT count(*) FROM lists WHERE id = %s", news) == 1

            campaigns.cancel(conn, cid)
            before = count(conn, bid)
            gone = api.delete(f"/api/v1/lists/{news}")
            assert gone.status_code == 200, gone.text
            assert "1 past campaign(s) no longer name it" in gone.json()["message"]
            assert api.delete(f"/api/v1/lists/{news}").status_code == 404

            page = http.post(f"/lists/{other}/delete", data={"csrf": csrf}, follow_redirects=False)
            assert page.status_code == 303
    assert scalar(conn, "SELECT count(*) FROM lists") == 0
    assert scalar(conn, "SELECT count(*) FROM subscribers") == 3
    assert count(conn, bid) == before  # the cancelled campaign's counts stay
    assert campaigns.status(conn, cid).status == "cancelled"
    # The sign-up's proof of consent stays, with no list.
    kept = conn.execute("SELECT list_id, ip FROM signup_consents").fetchall()
    assert kept == [{"list_id": None, "ip": "::1"}]
