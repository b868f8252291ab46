"""The dashboard does the whole day (issue 22 part 7), over real HTTP to a `senddock serve`:
a subscriber added, edited, put on and off lists, with their messages and bounces a page at a
time; lists created, renamed, described, switched to double opt-in; the settings the workers
use, with no secret in the page."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from senddock.audience.lists import configure
from senddock.testing import Catcher
from senddock.web import auth
from support import Conn, ThreadWorker, jobs, seed_list, send_campaign, unfinished, wait_until
from test_bounce_effects import back, report
from test_dashboard import logged_in
from web_support import Server, servers

EMAIL, PASSWORD = "admin@example.org", "correct horse battery staple"
ZOE = "zoë@bücher.example"


RELAY_PASSWORD = "S3cr3t-pässwörd"
MAILGUN_KEY = "key-mailgun-9f8e7d6c5b4a"
RELAYS = (
    f"smtp://ops%40relay:{quote(RELAY_PASSWORD)}@relay.example:2525?tls=starttls"
    "&per_minute=600&name=main smtps://backup.example?per_second=5&weight=2"
)
SETTINGS = {
    "SENDDOCK_PUBLIC_URL": "http://news.bücher.example",
    "SENDDOCK_RETENTION_DAYS": "30",
    "SENDDOCK_BOUNCE_DOMAIN": "bounces.example.org",
    "SENDDOCK_MAILGUN_SIGNING_KEY": MAILGUN_KEY,
}


@pytest.fixture(scope="module")
def shared(pg_url: str) -> Iterator[Server]:
    """One dashboard (no workers, so its relays are never dialled) for the module's tests: it
    keeps nothing between requests that the emptied tables would contradict."""
    for started in servers(pg_url):
        yield started(RELAYS, workers=False, env=SETTINGS)


@pytest.fixture
def server(shared: Server, conn: Conn) -> Server:
    auth.create_admin(conn, EMAIL, PASSWORD)
    return shared


def subscriber_row(conn: Conn, address: str) -> dict[str, object]:
    row = conn.execute(
        "SELECT id, email, name, attributes FROM subscribers WHERE lower(email) = lower(%s)",
        (address,),
    ).fetchone()
    assert row is not None, f"no subscriber {address}"
    return row


def memberships(conn: Conn, subscriber_id: object) -> dict[str, str]:
    rows = conn.execute(
        "SELECT l.name, m.status FROM list_memberships m JOIN lists l ON l.id = m.list_id"
        " WHERE m.subscriber_id = %s",
        (subscriber_id,),
    ).fetchall()
    return {str(r["name"]): str(r["status"]) for r in rows}


def test_a_subscriber_is_added_edited_and_moved_between_lists_on_their_page(
    server: Server, conn: Conn
) -> None:
    seed_list(conn, "Nouvelles", [])
    seed_list(conn, "weekly", [])
    with logged_in(server) as (http, csrf):
        added = http.post(
            "/subscribers",
            data={
                "csrf": csrf,
                "email": ZOE,
                "name": "Zoë Ümlaut",
                "attributes": '{"city": "Zürich", "plan": "pro"}',
                "lists": ["Nouvelles"],
            },
        )
        assert added.status_code == 303
        row = subscriber_row(conn, ZOE)
        assert (row["name"], row["attributes"]) == ("Zoë Ümlaut", {"city": "Zürich", "plan": "pro"})
        assert memberships(conn, row["id"]) == {"Nouvelles": "confirmed"}
        assert added.headers["location"] == f"/subscribers/{row['id']}"
        page = http.get(added.headers["location"]).text
        assert html.escape(str(row["email"])) in page and "Zürich" in page

        # The box is the whole object: a key taken out goes, a new one comes.
        edited = http.post(
            f"/subscribers/{row['id']}",
            data={"csrf": csrf, "name": "Zoë B.", "attributes": '{"city": "Köln", "n": 3}'},
        )
        assert edited.status_code == 303
        row = subscriber_row(conn, ZOE)
        assert (row["name"], row["attributes"]) == ("Zoë B.", {"city": "Köln", "n": 3})

        joined = http.post(
            f"/subscribers/{row['id']}/join", data={"csrf": csrf, "list_name": "weekly"}
        )
        assert joined.status_code == 303
        assert memberships(conn, row["id"]) == {"Nouvelles": "confirmed", "weekly": "confirmed"}
        left = http.post(
            f"/subscribers/{row['id']}/leave", data={"csrf": csrf, "list_name": "Nouvelles"}
        )
        assert left.status_code == 303
        assert memberships(conn, row["id"]) == {"weekly": "confirmed"}
        page = http.get(f"/subscribers/{row['id']}").text
        assert "removed from &#39;Nouvelles&#39;" in page or "removed from 'Nouvelles'" in page

        # A list that does not exist is not made by the join form.
        http.post(f"/subscribers/{row['id']}/join", data={"csrf": csrf, "list_name": "nope"})
        assert conn.execute("SELECT 1 FROM lists WHERE name = 'nope'").fetchone() is None


@pytest.mark.parametrize(
    ("attributes", "says"),
    [
        ("[1, 2]", "attributes must be a JSON object"),
        ('{"city": ', "attributes are not valid JSON"),
        ('"x' + "y" * 17_000 + '"', "attributes: at most 16,384 characters"),
    ],
)
def test_bad_attributes_are_refused_in_one_line_and_change_nothing(
    server: Server, conn: Conn, attributes: str, says: str
) -> None:
    seed_list(conn, "news", [ZOE])
    before = subscriber_row(conn, ZOE)
    with logged_in(server) as (http, csrf):
        edited = http.post(
            f"/subscribers/{before['id']}",
            data={"csrf": csrf, "name": "Changed", "attributes": attributes},
        )
        assert edited.status_code == 422
        assert says in edited.text
        added = http.post(
            "/subscribers",
            data={"csrf": csrf, "email": "new@example.org", "attributes": attributes},
        )
        assert added.status_code == 422 and says in added.text
    assert subscriber_row(conn, ZOE) == before
    assert (
        conn.execute("SELECT 1 FROM subscribers WHERE email = 'new@example.org'").fetchone() is None
    )


def test_adding_an_address_twice_or_a_bad_one_says_why(server: Server, conn: Conn) -> None:
    seed_list(conn, "news", [ZOE])
    with logged_in(server) as (http, csrf):
        twice = http.post("/subscribers", data={"csrf": csrf, "email": ZOE.upper()})
        assert twice.status_code == 409 and "already a subscriber" in twice.text
        bad = http.post("/subscribers", data={"csrf": csrf, "email": "not an address"})
        assert bad.status_code == 422
        assert http.get("/subscribers/999999").status_code == 404
    assert conn.execute("SELECT count(*) AS n FROM subscribers").fetchone() == {"n": 1}


def test_the_subscriber_page_shows_their_messages_and_bounces_a_page_at_a_time(
    server: Server, conn: Conn, catcher: Catcher, db_url: str
) -> None:
    _, bid = send_campaign(conn, "news", [ZOE, "other@example.org"], name="Hiver à Zürich")
    with ThreadWorker(db_url, catcher.url):
        assert wait_until(lambda: unfinished(conn, bid) == 0)
    job = jobs(conn, bid)[str(subscriber_row(conn, ZOE)["email"]).lower()]
    assert job["status"] == "sent"
    # 51 reports about the one message (each its own bytes): one more than a page.
    for n in range(51):
        sample = report("mailbox-full", str(job["email"]), str(job["message_id"]))
        back(conn, sample.replace(b"\r\n\r\n", f"\r\nX-Report: {n}\r\n\r\n".encode(), 1))
    sid = job["subscriber_id"]
    with logged_in(server) as (http, _):
        page = http.get(f"/subscribers/{sid}").text
        history = page.split('id="history"', 1)[1].split("</table>", 1)[0]
        assert "Hiver à Zürich" in history and 'data-status="sent"' in history
        assert "later: soft (mailboxfull)" in history  # the job's reason (0027)
        assert str(job["last_code"]) == "250" and "250" in history
        bounces = page.split('id="bounces"', 1)[1].split("</table>", 1)[0]
        assert bounces.count("<tr>") == 1 + 50  # the header row and a page of 50
        assert "soft" in bounces and "Hiver à Zürich" in bounces
        assert bounces.count("<td>mailboxfull</td>") == 50  # each report's reason
        assert f"/subscribers/{sid}?hpage=1&amp;bpage=2" in page
        second = http.get(f"/subscribers/{sid}?bpage=2").text
        rest = second.split('id="bounces"', 1)[1].split("</table>", 1)[0]
        assert rest.count("<tr>") == 1 + 1
        other = subscriber_row(conn, "other@example.org")
        theirs = http.get(f"/subscribers/{other['id']}").text
        assert "No bounce reported." in theirs


def test_lists_are_created_renamed_described_and_switched_to_double_opt_in(
    server: Server, conn: Conn
) -> None:
    seed_list(conn, "taken", [])
    with logged_in(server) as (http, csrf):
        made = http.post(
            "/lists/new", data={"csrf": csrf, "name": "Bücherfreunde", "description": "Monthly"}
        )
        assert made.status_code == 303
        lid = int(made.headers["location"].rsplit("/", 1)[1])
        lists_page = http.get("/lists").text
        assert "Bücherfreunde" in lists_page and "Monthly" in lists_page
        again = http.post("/lists/new", data={"csrf": csrf, "name": "Bücherfreunde"})
        assert again.status_code == 409 and "already is a list" in again.text

        def save(**fields: str) -> int:
            data = {"csrf": csrf, "name": "Bücherfreunde", "description": "Monthly", **fields}
            return http.post(f"/lists/{lid}", data=data).status_code

        assert save(name="Leseratten", description="Jeden Monat ein Buch") == 303
        # Double opt-in needs its From; refused, nothing changes.
        assert save(name="Leseratten", double_opt_in="on") == 422
        assert save(name="taken") == 409
        row = conn.execute("SELECT * FROM lists WHERE id = %s", (lid,)).fetchone()
        assert row is not None
        assert (row["name"], row["description"], row["double_opt_in"]) == (
            "Leseratten",
            "Jeden Monat ein Buch",
            False,
        )
        assert (
            save(name="Leseratten", double_opt_in="on", from_addr="Zoë <zoë@bücher.example>") == 303
        )
        row = conn.execute("SELECT * FROM lists WHERE id = %s", (lid,)).fetchone()
        assert row is not None
        assert (row["double_opt_in"], row["from_addr"]) == (True, "Zoë <zoë@bücher.example>")
        page = http.get(f"/lists/{lid}").text
        assert "Leseratten" in page and "checked" in page
        assert http.get("/lists/999999").status_code == 404


def test_the_new_forms_refuse_a_post_without_its_csrf_token(server: Server, conn: Conn) -> None:
    lid = seed_list(conn, "news", [ZOE])
    sid = subscriber_row(conn, ZOE)["id"]
    with logged_in(server) as (http, _):
        for path, data in [
            ("/subscribers", {"email": "x@example.org"}),
            (f"/subscribers/{sid}", {"name": "Changed"}),
            (f"/subscribers/{sid}/leave", {"list_name": "news"}),
            ("/lists/new", {"name": "new"}),
            (f"/lists/{lid}", {"name": "renamed"}),
        ]:
            assert http.post(path, data=data).status_code == 403, path
    assert conn.execute("SELECT count(*) AS n FROM subscribers").fetchone() == {"n": 1}
    assert conn.execute("SELECT name FROM lists").fetchall() == [{"name": "news"}]
    assert memberships(conn, sid) == {"news": "confirmed"}


def test_the_settings_page_shows_what_workers_use_and_never_a_secret(server: Server) -> None:
    with logged_in(server) as (http, _):
        page = http.get("/settings")
    assert page.status_code == 200
    text = page.text
    relay_table = text.split('id="relays"', 1)[1].split("</table>", 1)[0]
    for shown in ("main", "relay.example", "2525", "starttls", "ops@relay", "600/min"):
        assert shown in relay_table, shown
    for shown in ("backup.example", "465", "5/s", "set (hidden)"):
        assert shown in relay_table, shown
    for shown in ("http://news.bücher.example", "30 days", "bounces.example.org"):
        assert shown in text, shown
    # Durations in the units a person reads (issue 39: "1.2096e+06 s" for 14 days before).
    rows = dict(re.findall(r'<th scope="row">([^<]+)</th><td>([^<]*)</td>', text))
    assert rows["Session lifetime"] == "14 days" and rows["Session idle timeout"] == "12 h"
    assert rows["Heartbeat / lease"].endswith(" s") and "e+" not in text
    for secret in (RELAY_PASSWORD, quote(RELAY_PASSWORD), html.escape(RELAY_PASSWORD), MAILGUN_KEY):
        assert secret not in text
    assert json.dumps(RELAY_PASSWORD) not in text


def test_joining_a_double_opt_in_list_on_the_dashboard_mails_its_confirmation_request(
    pg_url: str, conn: Conn, catcher: Catcher
) -> None:
    """As `subscribers add` and the API do: added to a double opt-in list, or put on one from
    their page, the person gets the confirmation request now, and the page says so. Fails
    without subscriber_pages.asked_to_confirm (the membership waited with nothing sent)."""
    configure(conn, "Leseratten", double_opt_in=True, from_addr="Bücher <news@example.org>")
    seed_list(conn, "weekly", [])
    auth.create_admin(conn, EMAIL, PASSWORD)
    for started in servers(pg_url):
        srv = started(catcher.url, workers=False)
        with logged_in(srv) as (http, csrf):
            added = http.post(
                "/subscribers",
                data={"csrf": csrf, "email": ZOE, "name": "Zoë", "lists": ["weekly"]},
            )
            assert added.status_code == 303
            assert catcher.received() == []  # a single opt-in list asks nothing
            row = subscriber_row(conn, ZOE)
            joined = http.post(
                f"/subscribers/{row['id']}/join", data={"csrf": csrf, "list_name": "Leseratten"}
            )
            assert joined.status_code == 303
            assert catcher.wait_for(1)
            page = http.get(f"/subscribers/{row['id']}").text
        assert f"A confirmation request for Leseratten went to {html.escape(ZOE)}" in page
    [got] = catcher.received()
    assert got.rcpt == "zoë@xn--bcher-kva.example"
    assert "/confirm/" in got.data.decode()
    assert memberships(conn, row["id"]) == {"weekly": "confirmed", "Leseratten": "unconfirmed"}
