"""Exports and the attribute search (issue 35 item 4): everyone, a list, a segment or a filter
as CSV, and a campaign's recipients with their outcome, from the CLI, the API and the
dashboard; every cell a spreadsheet would run as a formula written as text; the subscriber
search narrowed by a segment filter."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

import pytest

from senddock.audience import erasure, segments, subscribers
from senddock.testing import Catcher
from senddock.web import auth
from support import Conn, ThreadWorker, send_campaign, senddock, unfinished, wait_until, worker_env
from test_dashboard import EMAIL, PASSWORD, logged_in
from web_support import ServerFactory, make_token, servers

LONDON = 'attributes.city = "London"'


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    yield from servers(db_url)


def people(conn: Conn) -> None:
    subscribers.add(conn, "ada@example.com", "Ada", {"city": "London"}, ("news",))
    subscribers.add(conn, "bob@example.com", "=HYPERLINK(1)", {"city": "London"}, ())
    subscribers.add(conn, "cy@example.com", "Cy", {"city": "Paris"}, ("news",))
    subscribers.add(conn, "gone@example.com", "Gone", {"city": "London"}, ())
    erasure.erase(conn, "gone@example.com")
    segments.add(conn, "londoners", LONDON)


def table(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_cli_exports_everyone_a_segment_or_a_filter(conn: Conn, db_url: str) -> None:
    people(conn)
    env = worker_env(db_url, "smtp://127.0.0.1:1")
    everyone = table(senddock(env, "subscribers", "export").stdout)
    assert [(r["email"], r["status"]) for r in everyone] == [
        ("ada@example.com", "active"),
        ("bob@example.com", "active"),
        ("cy@example.com", "active"),
    ]
    assert everyone[1]["name"] == "'=HYPERLINK(1)"  # text, not a formula
    by_segment = table(senddock(env, "subscribers", "export", "--segment", "londoners").stdout)
    assert [r["email"] for r in by_segment] == ["ada@example.com", "bob@example.com"]
    of_list = senddock(env, "subscribers", "export", "--list", "news", "--filter", LONDON)
    assert [r["email"] for r in table(of_list.stdout)] == ["ada@example.com"]
    bad = senddock(env, "subscribers", "export", "--filter", "attributes.city =")
    assert bad.returncode != 0 and "segment: expected a value at column" in bad.stderr


def test_api_and_dashboard_export_search_and_download_outcomes(
    conn: Conn, db_url: str, serve: ServerFactory
) -> None:
    people(conn)
    with Catcher() as catcher:  # bounce-* addresses are refused at RCPT (5.1.1)
        cid, bid = send_campaign(conn, "news", ["bounce-dee@example.com"])
        with ThreadWorker(db_url, catcher.url):
            assert wait_until(lambda: unfinished(conn, bid) == 0)
    auth.create_admin(conn, EMAIL, PASSWORD)
    server = serve(workers=False)
    with server.client(make_token(db_url)) as api:
        got = api.get("/api/v1/exports/subscribers.csv", params={"segment": "londoners"})
        assert got.status_code == 200 and got.headers["content-type"].startswith("text/csv")
        assert [r["email"] for r in table(got.text)] == ["ada@example.com", "bob@example.com"]
        bad = api.get("/api/v1/exports/subscribers.csv", params={"filter": "city = 1"})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "filter"
        found = api.get("/api/v1/subscribers", params={"filter": LONDON, "list": "news"})
        assert [s["email"] for s in found.json()["items"]] == ["ada@example.com"]
        assert found.json()["total"] == 1
        outcomes = table(api.get(f"/api/v1/campaigns/{cid}/recipients.csv").text)
        assert sorted((r["email"], r["status"], r["failure"]) for r in outcomes) == [
            ("ada@example.com", "sent", ""),
            ("bounce-dee@example.com", "failed", "bounced"),
            ("cy@example.com", "sent", ""),
        ]
        failed = api.get(f"/api/v1/campaigns/{cid}/recipients.csv", params={"status": "bounced"})
        [row] = table(failed.text)
        assert row["last_code"] == "550" and "no such user" in row["last_reply"]

    with logged_in(server) as (http, _):
        page = http.get("/subscribers", params={"filter": LONDON})
        assert "ada@example.com" in page.text and "bob@example.com" in page.text
        assert "cy@example.com" not in page.text
        refused = http.get("/subscribers", params={"filter": "attributes.city ="})
        assert refused.status_code == 422 and "expected a value at column" in refused.text
        download = http.get("/subscribers/export.csv", params={"filter": LONDON})
        assert [r["email"] for r in table(download.text)] == ["ada@example.com", "bob@example.com"]
        assert download.headers["cache-control"] == "no-store"
        recipients = http.get(f"/campaigns/{cid}/recipients.csv", params={"status": "sent"})
        assert sorted(r["email"] for r in table(recipients.text)) == [
            "ada@example.com",
            "cy@example.com",
        ]
