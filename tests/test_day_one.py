"""A new user's first day (issue 35, item 3), over real HTTP and the real CLI: each test is one
gap that a first day showed, asserted on what the page, the API or the command says and on
what the SMTP server received."""

from __future__ import annotations

import email
import email.policy
import re
from collections.abc import Iterator

import pytest

from senddock.audience.segments import add as add_segment
from senddock.campaigns import create_campaign
from senddock.testing import Catcher
from senddock.web import auth
from support import Conn, seed_list, send_campaign, senddock, worker_env
from test_dashboard import EMAIL, PASSWORD, logged_in
from web_support import Server, make_token, start_server


@pytest.fixture
def server(db_url: str, conn: Conn, catcher: Catcher) -> Iterator[Server]:
    """The dashboard and API without workers (rows stay as a test sets them); test sends go
    to the catcher."""
    auth.create_admin(conn, EMAIL, PASSWORD)
    srv = start_server(db_url, catcher.url, workers=False)
    yield srv
    srv.stop()
    print(srv.text())


def fail_jobs(conn: Conn, bid: int, failure: str, reply: str = "5.1.1 no such user") -> None:
    conn.execute(
        "UPDATE broadcast_jobs SET status = 'failed', failure = %s, attempts = 1,"
        " last_stage = 'rcpt', last_code = 550, last_enhanced = '5.1.1', last_reply = %s"
        " WHERE broadcast_id = %s",
        (failure, reply, bid),
    )


def test_the_send_flash_names_the_whole_audience_not_the_first_chunk(
    server: Server, conn: Conn
) -> None:
    """1,500 members spread over 3,000 subscriber ids: the first enqueue chunk (1,000 ids)
    holds 500 of them, and the flash said so."""
    conn.execute(
        "INSERT INTO subscribers (email) SELECT 'u' || g || '@example.org'"
        " FROM generate_series(1, 3000) g"
    )
    seed_list(conn, "news", [f"u{g}@example.org" for g in range(2, 3001, 2)])
    cid = create_campaign(
        conn, name="all", list_name="news", subject="S", from_addr="n@example.org", text_body="Hi"
    )
    with logged_in(server) as (http, token):
        assert http.post(f"/campaigns/{cid}/send", data={"csrf": token}).status_code == 303
        page = http.get(f"/campaigns/{cid}").text
    assert "Sending to 1500 recipients." in page


def test_a_reply_shows_its_enhanced_code_once_on_every_surface(
    server: Server, conn: Conn, db_url: str
) -> None:
    cid, bid = send_campaign(conn, "news", ["ada@example.org"])
    conn.execute(
        "UPDATE broadcast_jobs SET status = 'sent', sent_at = now(), attempts = 1,"
        " last_stage = 'data', last_code = 250, last_enhanced = '2.0.0',"
        " last_reply = '2.0.0 queued as 4XyZ' WHERE broadcast_id = %s",
        (bid,),
    )
    sid = conn.execute("SELECT id FROM subscribers").fetchone()["id"]  # type: ignore[index]
    with logged_in(server) as (http, _):
        campaign_page = http.get(f"/campaigns/{cid}").text
        subscriber_page = http.get(f"/subscribers/{sid}").text
    with server.client(make_token(db_url)) as api:
        items = api.get(f"/api/v1/campaigns/{cid}/recipients").json()["items"]
    cli = senddock(worker_env(db_url, "smtp://127.0.0.1:1"), "campaign", "recipients", str(cid))
    for text in (campaign_page, subscriber_page, cli.stdout):
        assert "250 2.0.0 queued as 4XyZ" in text, text
        assert "2.0.0 2.0.0" not in text
    assert items[0]["reply"] == "250 2.0.0 queued as 4XyZ"


def test_list_counts_count_suppressed_members_apart_from_confirmed(
    server: Server, conn: Conn, db_url: str
) -> None:
    seed_list(conn, "news", ["ada@example.org", "bob@example.org", "Cy@Example.org"])
    conn.execute(
        "INSERT INTO suppressions (email, reason) VALUES ('cy@example.org', 'bounce'),"
        " ('bob@example.org', 'complaint'), ('nobody@example.org', 'manual')"
    )
    with server.client(make_token(db_url)) as api:
        [info] = api.get("/api/v1/lists").json()
    cli = senddock(worker_env(db_url, "smtp://127.0.0.1:1"), "lists", "show")
    with logged_in(server) as (http, _):
        row = re.search(
            r"<tr>\s*<td><a href=\"/subscribers\?list=news\">.*?</tr>",
            http.get("/lists").text,
            re.S,
        )
    assert (info["confirmed"], info["suppressed"], info["unsubscribed"]) == (1, 2, 0)
    assert "news: 1 confirmed, 0 unconfirmed, 0 unsubscribed, 2 suppressed" in cli.stdout
    assert row is not None
    cells = re.findall(r'<td class="num">(\d+)</td>', row.group(0))
    assert cells == ["1", "0", "0", "2"]


def test_bounces_list_points_to_the_refusals_at_rcpt(conn: Conn, db_url: str) -> None:
    cid, bid = send_campaign(conn, "news", [f"r{i}@example.org" for i in range(30)])
    fail_jobs(conn, bid, "bounced")
    out = senddock(worker_env(db_url, "smtp://127.0.0.1:1"), "bounces", "list").stdout
    assert "no findings" not in out
    assert "no later reports" in out
    assert (
        f"campaign {cid}: 30 recipients refused at RCPT (bounced at send):"
        f" senddock campaign recipients {cid} --status bounced"
    ) in out


def test_the_live_preview_renders_for_the_first_of_the_segment(server: Server, conn: Conn) -> None:
    seed_list(conn, "news", ["ada@example.org", "bob@example.org", "cy@example.org"])
    conn.execute(
        "UPDATE subscribers SET name = 'Bob Londoner', attributes = '{\"city\": \"London\"}'"
        " WHERE email = 'bob@example.org'"
    )
    add_segment(conn, "london", 'attributes.city = "London"')
    form = {
        "lists": "news",
        "subject": "Hi {{ subscriber.name }}",
        "from_addr": "n@example.org",
        "text_body": "Hello {{ subscriber.name }}",
    }
    with logged_in(server) as (http, token):
        everyone = http.post("/campaigns/preview", data={**form, "csrf": token}).text
        segment = http.post(
            "/campaigns/preview", data={**form, "csrf": token, "segment": "london"}
        ).text
        own = http.post(
            "/campaigns/preview",
            data={**form, "csrf": token, "segment": "london", "filter": 'email = "cy@example.org"'},
        ).text
    assert "Hello Name 1" in everyone
    assert "Hello Bob Londoner" in segment and "to bob@example.org" in segment
    assert "to cy@example.org" in own  # its own filter wins over the segment, as at send


def test_a_test_send_to_a_non_subscriber_renders_as_the_first_subscriber(
    server: Server, conn: Conn, catcher: Catcher
) -> None:
    seed_list(conn, "news", ["ada@example.org"])
    sid = conn.execute("SELECT id FROM subscribers").fetchone()["id"]  # type: ignore[index]
    cid = create_campaign(
        conn,
        name="t",
        list_name="news",
        subject="Hi {{ subscriber.name }}",
        from_addr="n@example.org",
        text_body="Hello {{ subscriber.name }}, leave: {{ unsubscribe_url }}",
    )
    with logged_in(server) as (http, token):
        r = http.post(f"/campaigns/{cid}/test", data={"csrf": token, "to": "me@elsewhere.example"})
        assert r.status_code == 303
    [got] = catcher.received()
    msg = email.message_from_bytes(got.data, policy=email.policy.default)
    assert got.rcpt == "me@elsewhere.example"
    assert msg["Subject"] == "Hi Name 1"
    assert "Hello Name 1, leave: " in msg.get_content()
    # Neither subscriber 0's link nor the real subscriber's: nobody's list can be left by it.
    assert msg["List-Unsubscribe"] is None
    assert (
        f"/unsubscribe/{sid}." not in got.data.decode()
        and "/unsubscribe/0." not in got.data.decode()
    )


def retry_button(page: str) -> str:
    found = re.search(r'<form method="post" action="/campaigns/\d+/retry-failed"[^>]*>', page)
    assert found, "no Retry failed form"
    return found.group(0)


def test_retry_failed_is_hidden_when_every_failure_is_a_bounce(server: Server, conn: Conn) -> None:
    bounced, bid = send_campaign(conn, "news", ["ada@example.org", "bob@example.org"])
    fail_jobs(conn, bid, "bounced")
    exhausted, bid2 = send_campaign(conn, "other", ["cy@example.org"], name="other")
    fail_jobs(conn, bid2, "exhausted", "4.4.1 timed out")
    with logged_in(server) as (http, _):
        none_to_retry = retry_button(http.get(f"/campaigns/{bounced}").text)
        one_to_retry = retry_button(http.get(f"/campaigns/{exhausted}").text)
    assert " hidden" in none_to_retry
    assert " hidden" not in one_to_retry


def test_leave_is_not_offered_for_a_list_already_left(server: Server, conn: Conn) -> None:
    seed_list(conn, "news", ["ada@example.org"])
    seed_list(conn, "old", ["ada@example.org"])
    conn.execute(
        "UPDATE list_memberships SET status = 'unsubscribed'"
        " WHERE list_id = (SELECT id FROM lists WHERE name = 'old')"
    )
    sid = conn.execute("SELECT id FROM subscribers").fetchone()["id"]  # type: ignore[index]
    with logged_in(server) as (http, _):
        page = http.get(f"/subscribers/{sid}").text
    assert "Leave news" in page
    assert "Leave old" not in page


def test_the_api_takes_send_at_and_shows_a_suppressed_subscriber_as_suppressed(
    server: Server, conn: Conn, db_url: str
) -> None:
    seed_list(conn, "news", ["ada@example.org", "bob@example.org"])
    conn.execute("INSERT INTO suppressions (email, reason) VALUES ('bob@example.org', 'bounce')")
    cid = create_campaign(
        conn, name="s", list_name="news", subject="S", from_addr="n@example.org", text_body="Hi"
    )
    with server.client(make_token(db_url)) as api:
        by_name = api.post(
            f"/api/v1/campaigns/{cid}/schedule", json={"send_at": "2099-01-01T09:00:00Z"}
        )
        old_name = api.post(f"/api/v1/campaigns/{cid}/schedule", json={"at": None})
        naive = api.post(
            f"/api/v1/campaigns/{cid}/schedule", json={"send_at": "2099-01-01T09:00:00"}
        )
        neither = api.post(f"/api/v1/campaigns/{cid}/schedule", json={})
        listed = {r["email"]: r["status"] for r in api.get("/api/v1/subscribers").json()["items"]}
        bob = conn.execute("SELECT id FROM subscribers WHERE email = 'bob@example.org'").fetchone()
        assert bob is not None
        one = api.get(f"/api/v1/subscribers/{bob['id']}").json()
    assert by_name.status_code == 200 and by_name.json()["send_at"].startswith("2099-01-01")
    assert old_name.status_code == 200 and old_name.json()["send_at"] is None
    assert naive.status_code == 422 and naive.json()["error"]["field"] == "send_at"
    assert neither.status_code == 422
    assert listed == {"ada@example.org": "active", "bob@example.org": "suppressed"}
    assert one["status"] == "suppressed" and one["suppressed"]["reason"] == "bounce"
