"""The dashboard over real HTTP: a `senddock serve` process, httpx with a cookie jar, rows."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest

from senddock import campaigns
from senddock.testing import Catcher
from senddock.web import auth
from support import Conn, seed_list, send_campaign
from web_support import Server, start_server

EMAIL = "admin@example.org"
PASSWORD = "correct horse battery staple"
PAGES = ("/", "/campaigns/new", "/campaigns/1", "/subscribers", "/lists", "/suppressions")


@pytest.fixture
def admin(conn: Conn) -> int:
    return auth.create_admin(conn, EMAIL, PASSWORD)


@pytest.fixture
def server(db_url: str, admin: int) -> Iterator[Server]:
    """The dashboard, without workers: what is queued stays queued."""
    srv = start_server(db_url, "smtp://127.0.0.1:1", workers=False)
    yield srv
    srv.stop()
    print(srv.text())


def client(server: Server) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=30, follow_redirects=False)


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "the page has no CSRF field"
    return found.group(1)


def log_in(http: httpx.Client, email: str = EMAIL, password: str = PASSWORD) -> httpx.Response:
    token = csrf_of(http.get("/login").text)
    return http.post(
        "/login", data={"csrf": token, "email": email, "password": password, "next": "/"}
    )


@contextmanager
def logged_in(server: Server) -> Iterator[tuple[httpx.Client, str]]:
    """A client with a dashboard session, and the session's CSRF token."""
    with client(server) as http:
        assert log_in(http).status_code == 303
        yield http, csrf_of(http.get("/").text)


def first_event(http: httpx.Client, path: str) -> tuple[str, dict[str, Any]]:
    """The first Server-Sent Event of a stream: (event name, its JSON data)."""
    name = ""
    with http.stream("GET", path) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        for line in stream.iter_lines():
            if line.startswith("event:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                return name, json.loads(line.split(":", 1)[1])
    raise AssertionError("the stream ended without an event")


def test_every_page_and_stream_redirects_to_login_without_a_session(server: Server) -> None:
    with client(server) as http:
        for path in (*PAGES, "/workers", "/events/campaigns", "/events/campaigns/1"):
            r = http.get(path)
            assert r.status_code == 303, path
            assert r.headers["location"].startswith("/login?next=/"), path
            assert "campaign" not in r.text
        r = http.post("/campaigns/1/pause", data={"csrf": "x"})
        assert (r.status_code, r.headers["location"]) == (303, "/login?next=/campaigns/1/pause")


def test_login_opens_every_page_and_logout_closes_them(server: Server) -> None:
    with logged_in(server) as (http, token):
        for path in PAGES[:2] + PAGES[3:]:
            assert http.get(path).status_code == 200, path
        assert http.get("/campaigns/1").status_code == 404
        assert http.post("/logout", data={"csrf": token}).status_code == 303
        assert http.get("/").status_code == 303


def test_wrong_password_gets_no_session(server: Server) -> None:
    with client(server) as http:
        r = log_in(http, password="not the password")
        assert r.status_code == 401
        assert "Wrong email or password" in r.text
        assert http.get("/").headers["location"] == "/login?next=/"


def test_sixth_wrong_attempt_is_refused_with_429_even_with_the_right_password(
    server: Server,
) -> None:
    with client(server) as http:
        for _ in range(5):
            assert log_in(http, password="guess").status_code == 401
        r = log_in(http)
        assert r.status_code == 429
        assert "Too many failed sign-ins" in r.text
        assert http.get("/").status_code == 303
        # Another address is not locked out by this one's failures.
        assert log_in(http, email="nobody@example.org", password="x").status_code == 401


def test_login_without_csrf_token_is_refused(server: Server) -> None:
    with client(server) as http:
        http.get("/login")
        r = http.post("/login", data={"email": EMAIL, "password": PASSWORD})
        assert r.status_code == 403
        assert http.get("/").status_code == 303


def test_login_goes_back_only_to_a_page_of_this_site(server: Server) -> None:
    with client(server) as http:
        token = csrf_of(http.get("/login?next=//evil.example/x").text)
        r = http.post(
            "/login",
            data={"csrf": token, "email": EMAIL, "password": PASSWORD, "next": "//evil.example/x"},
        )
        assert (r.status_code, r.headers["location"]) == (303, "/")


def test_form_posts_without_the_csrf_token_are_refused_and_change_nothing(
    server: Server, conn: Conn
) -> None:
    cid, bid = send_campaign(conn, "news", ["ada@example.org", "bob@example.org"])
    with logged_in(server) as (http, token):
        for data in ({}, {"csrf": "forged"}, {"csrf": token[:-1]}):
            for action in ("pause", "cancel"):
                r = http.post(f"/campaigns/{cid}/{action}", data=data)
                assert r.status_code == 403, (action, data)
            r = http.post("/suppressions", data={**data, "email": "ada@example.org"})
            assert r.status_code == 403
        assert campaigns.status(conn, cid).status == "sending"
        b = conn.execute("SELECT status FROM broadcasts WHERE id = %s", (bid,)).fetchone()
        assert b == {"status": "running"}
        assert conn.execute("SELECT count(*) AS n FROM suppressions").fetchone() == {"n": 0}
        assert campaigns.status(conn, cid).counts.pending == 2


def test_pause_and_resume_buttons_change_the_broadcast(server: Server, conn: Conn) -> None:
    cid, bid = send_campaign(conn, "news", ["ada@example.org"])
    with logged_in(server) as (http, token):
        r = http.post(f"/campaigns/{cid}/pause", data={"csrf": token})
        assert (r.status_code, r.headers["location"]) == (303, f"/campaigns/{cid}")
        row = conn.execute("SELECT status FROM broadcasts WHERE id = %s", (bid,)).fetchone()
        assert row == {"status": "paused"}
        page = http.get(f"/campaigns/{cid}").text
        assert "Paused: no new messages start" in page
        # The second pause is refused with the reason, not an error page.
        http.post(f"/campaigns/{cid}/pause", data={"csrf": token})
        assert "cannot pause campaign" in http.get(f"/campaigns/{cid}").text
        http.post(f"/campaigns/{cid}/resume", data={"csrf": token})
        row = conn.execute("SELECT status FROM broadcasts WHERE id = %s", (bid,)).fetchone()
        assert row == {"status": "running"}
        http.post(f"/campaigns/{cid}/cancel", data={"csrf": token})
        assert campaigns.status(conn, cid).counts.cancelled == 1


def test_campaign_streams_push_exact_counts(server: Server, conn: Conn) -> None:
    cid, bid = send_campaign(conn, "news", ["a@example.org", "b@example.org", "c@example.org"])
    conn.execute(
        "UPDATE broadcast_jobs SET status = 'sent', sent_at = now()"
        " WHERE broadcast_id = %s AND email = 'a@example.org'",
        (bid,),
    )
    with logged_in(server) as (http, _):
        name, data = first_event(http, "/events/campaigns")
        assert name == "campaigns"
        assert data["campaigns"] == [
            {
                "id": cid,
                "status": "sending",
                "state": "sending",
                "total": 3,
                "sent": 1,
                "failed": 0,
                "cancelled": 0,
                "done": 1,
                "percent": 33,
                "unconfirmed": 0,
            }
        ]
        name, one = first_event(http, f"/events/campaigns/{cid}")
        assert name == "campaign"
        assert (one["total"], one["sent"], one["pending"], one["percent"]) == (3, 1, 2, 33)
        assert 1 <= one["rate"] <= 12  # 1 sent just now: over at least 5 s, at most 12/min
        assert one["chart"].startswith("<svg") and "1 sent" in one["chart"]


def test_new_campaign_form_shows_a_template_error_and_stores_nothing(
    server: Server, conn: Conn
) -> None:
    seed_list(conn, "news", ["ada@example.org"])
    form = {
        "name": "June",
        "lists": "news",
        "subject": "Hi {{ subscriber.name }",
        "from_addr": "News <news@example.org>",
        "text_body": "Hello",
    }
    with logged_in(server) as (http, token):
        form["csrf"] = token
        r = http.post("/campaigns", data=form)
        assert r.status_code == 422
        assert "subject template, line 1" in r.text
        assert 'value="June"' in r.text  # what was typed is kept
        assert conn.execute("SELECT count(*) AS n FROM campaigns").fetchone() == {"n": 0}
        r = http.post("/campaigns", data={**form, "subject": "Hi {{ subscriber.name }}"})
        assert r.status_code == 303
        cid = int(r.headers["location"].rsplit("/", 1)[1])
        assert campaigns.status(conn, cid).status == "draft"
        r = http.post(f"/campaigns/{cid}/send", data={"csrf": token})
        assert r.status_code == 303
        assert campaigns.status(conn, cid).counts.pending == 1


def test_import_form_imports_the_file_and_reports_rejected_lines(
    server: Server, conn: Conn
) -> None:
    rows = "email,name\nada@example.org,Ada\nnot-an-address,X\nbob@example.org,Bob\n"
    with logged_in(server) as (http, token):
        r = http.post(
            "/lists/import",
            data={"csrf": token, "list_name": "news"},
            files={"file": ("people.csv", rows.encode(), "text/csv")},
        )
        assert r.status_code == 303
        job_path = r.headers["location"]
        assert re.fullmatch(r"/imports/\d+", job_path)
        events: list[dict[str, Any]] = []
        with http.stream("GET", job_path.replace("/imports", "/events/imports")) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    events.append(json.loads(line.split(":", 1)[1]))
        assert events[-1]["status"] == "done"
        assert (events[-1]["imported"], events[-1]["rejected"]) == (2, 1)
        page = http.get(job_path).text
        assert "line 3: invalid address" in page
    members = conn.execute(
        "SELECT s.email FROM subscribers s JOIN list_memberships m ON m.subscriber_id = s.id"
        " JOIN lists l ON l.id = m.list_id WHERE l.name = 'news' ORDER BY 1"
    ).fetchall()
    assert [m["email"] for m in members] == ["ada@example.org", "bob@example.org"]


def test_suppression_list_adds_and_removes_addresses(server: Server, conn: Conn) -> None:
    with logged_in(server) as (http, token):
        http.post("/suppressions", data={"csrf": token, "email": "Ada@Example.org"})
        row = conn.execute("SELECT email, reason FROM suppressions").fetchone()
        assert row == {"email": "Ada@example.org", "reason": "manual"}
        assert "Ada@example.org" in http.get("/suppressions?q=ada").text
        http.post("/suppressions/remove", data={"csrf": token, "email": "ada@example.org"})
        assert conn.execute("SELECT count(*) AS n FROM suppressions").fetchone() == {"n": 0}


def test_user_data_is_escaped_on_every_page(server: Server, conn: Conn) -> None:
    evil = "<script>alert(1)</script>"
    seed_list(conn, "news", ["ada@example.org"])
    conn.execute("UPDATE subscribers SET name = %s", (evil,))
    cid = campaigns.create_campaign(
        conn,
        name=evil,
        list_name="news",
        subject="Hi",
        from_addr="News <news@example.org>",
        text_body="x",
    )
    with logged_in(server) as (http, _):
        for path in ("/", f"/campaigns/{cid}", "/subscribers"):
            page = http.get(path).text
            assert evil not in page, path
            assert "&lt;script&gt;" in page, path


def test_recipients_table_filters_searches_and_pages(server: Server, conn: Conn) -> None:
    emails = [f"r{i:03}@example.org" for i in range(60)]
    cid, bid = send_campaign(conn, "news", emails)
    conn.execute(
        "UPDATE broadcast_jobs SET status = 'failed', failure = 'bounced'"
        " WHERE broadcast_id = %s AND email = 'r007@example.org'",
        (bid,),
    )
    with logged_in(server) as (http, _):
        first = http.get(f"/campaigns/{cid}").text
        assert "r000@example.org" in first and "r050@example.org" not in first
        assert 'rel="next"' in first
        second = http.get(f"/campaigns/{cid}?page=2").text
        assert "r050@example.org" in second and "r000@example.org" not in second
        bounced = http.get(f"/campaigns/{cid}?status=bounced").text
        assert "r007@example.org" in bounced and "r008@example.org" not in bounced
        found = http.get(f"/campaigns/{cid}?q=r05").text
        assert re.findall(r"r05\d@example.org", found) == [f"r05{i}@example.org" for i in range(10)]


def test_workers_page_lists_the_serving_worker(db_url: str, admin: int, catcher: Catcher) -> None:
    srv = start_server(db_url, catcher.url, workers=True)
    try:
        with logged_in(srv) as (http, _):
            page = http.get("/workers").text
            assert "No worker is registered" not in page
            name, data = first_event(http, "/events/workers")
            assert name == "workers"
            assert [w["health"] for w in data["workers"]] == ["live"]
    finally:
        srv.stop()


def test_the_rate_is_averaged_over_the_time_sending_took_not_a_whole_minute(
    server: Server, conn: Conn
) -> None:
    """10 s into a 1,200/min send: 200 sent over the last 10 s (database clock) is 1,200/min,
    where a fixed minute window showed 200."""
    cid, bid = send_campaign(conn, "news", [f"r{i:03}@example.org" for i in range(300)])
    conn.execute(
        "UPDATE broadcasts SET created_at = now() - interval '11 seconds' WHERE id = %s", (bid,)
    )
    conn.execute(
        "UPDATE broadcast_jobs j SET status = 'sent',"
        " sent_at = now() - interval '10 seconds' + n.k * interval '50 milliseconds'"
        " FROM (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM broadcast_jobs"
        "       WHERE broadcast_id = %s ORDER BY id LIMIT 200) n"
        " WHERE j.id = n.id",
        (bid,),
    )

    def over_span() -> float:
        """The 200 sends as a rate a minute over the seconds since the first, now (database
        clock)."""
        row = conn.execute(
            "SELECT extract(epoch FROM now() - min(sent_at))::float8 AS s FROM broadcast_jobs"
            " WHERE broadcast_id = %s AND status = 'sent'",
            (bid,),
        ).fetchone()
        assert row is not None
        return 200 * 60 / float(row["s"])

    # The span grows while the server answers: the rate lies between the figures before and
    # after the reads, whatever the machine's speed (the old rate, 200, is below both).
    with logged_in(server) as (http, _):
        high = over_span()
        _, state = first_event(http, f"/events/campaigns/{cid}")
        page = http.get(f"/campaigns/{cid}").text
        low = over_span()
    assert state["sent"] == 200
    assert int(low) <= state["rate"] <= round(high), (low, state["rate"], high)
    shown = re.search(r'data-field="rate">(\d+)<', page)
    assert shown and int(low) <= int(shown.group(1)) <= round(high), page


VOID = frozenset("area base br col embed hr img input link meta source track wbr".split())  # noqa: SIM905


class _Switched(HTMLParser):
    """The elements of a page that show for some statuses only (data-when): their text."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, tuple[bool, str]] = {}
        self._open: list[tuple[str, bool, list[str]] | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in VOID:
            return
        a = dict(attrs)
        when = a.get("data-when")
        self._open.append((when, "hidden" in a, []) if when and tag != "form" else None)

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        top = self._open.pop()
        if top is not None:
            self.found[top[0]] = (top[1], "".join(top[2]).strip())

    def handle_data(self, data: str) -> None:
        for element in self._open:
            if element is not None:
                element[2].append(data)


def shown(page: str) -> dict[str, tuple[bool, str]]:
    """{data-when statuses: (hidden, text)} of the non-form elements of `page`."""
    parser = _Switched()
    parser.feed(page)
    return parser.found


def test_a_cancelled_campaign_shows_cancelled_with_its_counts_not_100_percent_done(
    server: Server, conn: Conn
) -> None:
    """25 recipients, 8 sent, then cancelled: the 17 cancelled jobs are final, and the page
    used to say "100 % done · 25 of 25" under a full green bar."""
    cid, bid = send_campaign(conn, "news", [f"r{i:02}@example.org" for i in range(25)])
    conn.execute(
        "UPDATE broadcast_jobs SET status = 'sent', sent_at = now() WHERE id IN"
        " (SELECT id FROM broadcast_jobs WHERE broadcast_id = %s ORDER BY id LIMIT 8)",
        (bid,),
    )
    with logged_in(server) as (http, token):
        http.post(f"/campaigns/{cid}/cancel", data={"csrf": token})
        assert campaigns.status(conn, cid).status == "cancelled"

        page = http.get(f"/campaigns/{cid}").text
        bar = re.search(r'<div class="progress" role="progressbar"[^>]*>', page)
        assert bar, page
        assert 'aria-valuenow="32"' in bar.group(0) and 'data-status="cancelled"' in bar.group(0)
        lines = shown(page)
        assert lines["cancelled"] == (False, "Cancelled · 8 sent · 17 cancelled of 25")
        assert lines["draft sending paused sent"][0] is True  # the "% done" line is hidden

        listing = http.get("/").text
        row = re.search(rf'<tr data-campaign="{cid}">(.*?)</tr>', listing, re.S)
        assert row, listing
        assert 'aria-valuenow="32" data-field="percent" data-status="cancelled"' in row.group(1)
        cells = shown(row.group(1))
        assert cells["cancelled"] == (False, "32 % sent · 17 cancelled")
        assert cells["draft sending paused sent"][0] is True

        _, data = first_event(http, "/events/campaigns")
        assert (data["campaigns"][0]["percent"], data["campaigns"][0]["cancelled"]) == (32, 17)


def test_sending_with_no_live_worker_says_nothing_will_go_until_one_runs(
    server: Server, conn: Conn
) -> None:
    """Issue 18: the dashboard's Send said only "Sending to N recipients." with no worker
    running, so nothing went and nothing said why."""
    seed_list(conn, "news", ["ada@example.org", "bob@example.org"])
    cid = campaigns.create_campaign(
        conn, name="n", list_name="news", subject="s", from_addr="a@example.org", text_body="t"
    )
    with logged_in(server) as (http, token):
        r = http.post(f"/campaigns/{cid}/send", data={"csrf": token})
        assert r.status_code == 303
        page = http.get(f"/campaigns/{cid}").text
    assert "Sending to 2 recipients. Note: no worker is running" in page, page
