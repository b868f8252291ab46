"""Erasure and the consent record on every surface: `senddock subscribers consent|erase`, and
GET /api/v1/subscribers/{id}/consent(.csv), POST /api/v1/subscribers/{id}/erase through a real
`senddock serve`. Each asserts what the rows hold after, not only what was printed."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator

import pytest

from senddock.audience import preferences, signup, subscribers
from senddock.audience.lists import ensure_list
from senddock.web import auth
from support import Conn, senddock, worker_env
from test_dashboard import EMAIL, PASSWORD, logged_in
from web_support import ServerFactory, make_token, servers

ADA = "ada@example.com"
IP, AGENT = "198.51.100.23", '=HYPERLINK("http://evil.example")'


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    yield from servers(db_url)


def signed_up(conn: Conn) -> int:
    """Ada signed up to `news` through the public form, then left `offers` on her page."""
    news = ensure_list(conn, "news")
    signup.set_public(conn, news, True)
    signup.sign_up(
        conn, signup.PublicList(news, "news", False, signup.DEFAULT_CONSENT), ADA, "Ada", IP, AGENT
    )
    subscribers.update(conn, ADA, lists=("offers",))
    sid = subscribers.show(conn, ADA).id
    assert preferences.change(conn, sid, "leave", ensure_list(conn, "offers"), None)
    return sid


def rows_of(conn: Conn, sid: int) -> int:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM subscribers WHERE id = %(s)s)"
        " + (SELECT count(*) FROM signup_consents WHERE subscriber_id = %(s)s)"
        " + (SELECT count(*) FROM subscription_events WHERE subscriber_id = %(s)s) AS n",
        {"s": sid},
    ).fetchone()
    assert row is not None
    return int(row["n"])


def test_cli_shows_exports_and_erases_the_consent_record(conn: Conn, db_url: str) -> None:
    sid = signed_up(conn)
    env = worker_env(db_url, "smtp://127.0.0.1:1")

    text = senddock(env, "subscribers", "consent", ADA)
    assert text.returncode == 0, text.stderr
    assert f"signed up to 'news' (single opt-in) from {IP}" in text.stdout
    assert "leave 'offers' (preferences page)" in text.stdout

    as_json = senddock(env, "subscribers", "consent", ADA, "--format", "json")
    record = json.loads(as_json.stdout)
    assert [(x["list"], x["ip"], x["user_agent"]) for x in record["signups"]] == [
        ("news", IP, AGENT)
    ]
    assert [(e["action"], e["list"]) for e in record["events"]] == [("leave", "offers")]

    as_csv = senddock(env, "subscribers", "consent", ADA, "--format", "csv")
    table = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert [(r["kind"], r["list"], r["action"]) for r in table] == [
        ("signup", "news", ""),
        ("event", "offers", "leave"),
    ]
    assert table[0]["user_agent"] == "'" + AGENT  # a formula is written as text

    # Without --yes and nobody to answer: refused, nothing erased.
    asked = senddock(env, "subscribers", "erase", ADA)
    assert asked.returncode != 0 and rows_of(conn, sid) == 3
    done = senddock(env, "subscribers", "erase", ADA, "--yes", "--keep-suppressed")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{ADA} erased: the row deleted")
    assert "stays suppressed" in done.stdout
    assert rows_of(conn, sid) == 0
    again = senddock(env, "subscribers", "consent", ADA)
    assert again.returncode != 0 and "no subscriber" in again.stderr


def test_api_reads_the_consent_record_and_erases_only_when_confirmed(
    conn: Conn, db_url: str, serve: ServerFactory
) -> None:
    sid = signed_up(conn)
    server = serve(workers=False)
    with server.client(make_token(db_url)) as api:
        got = api.get(f"/api/v1/subscribers/{sid}/consent")
        assert got.status_code == 200, got.text
        body = got.json()
        assert (body["email"], body["signups"][0]["ip"], body["events"][0]["action"]) == (
            ADA,
            IP,
            "leave",
        )
        as_csv = api.get(f"/api/v1/subscribers/{sid}/consent.csv")
        assert as_csv.status_code == 200 and as_csv.headers["content-type"].startswith("text/csv")
        assert [r["kind"] for r in csv.DictReader(io.StringIO(as_csv.text))] == [
            "signup",
            "event",
        ]

        wrong = api.post(f"/api/v1/subscribers/{sid}/erase", json={"confirm": "bob@example.com"})
        assert wrong.status_code == 422 and wrong.json()["error"]["field"] == "confirm"
        assert rows_of(conn, sid) == 3
        done = api.post(f"/api/v1/subscribers/{sid}/erase", json={"confirm": ADA.upper()})
        assert done.status_code == 200, done.text
        assert (done.json()["kept_row"], done.json()["consents"], done.json()["events"]) == (
            False,
            1,
            1,
        )
        assert rows_of(conn, sid) == 0
        assert api.get(f"/api/v1/subscribers/{sid}/consent").status_code == 404
        assert (
            api.post(f"/api/v1/subscribers/{sid}/erase", json={"confirm": ADA}).status_code == 404
        )


def test_dashboard_shows_the_record_deletes_and_erases_on_confirmation(
    conn: Conn, db_url: str, serve: ServerFactory
) -> None:
    sid = signed_up(conn)
    bob = subscribers.add(conn, "bob@example.com", "Bob", None, ("news",))
    auth.create_admin(conn, EMAIL, PASSWORD)
    server = serve(workers=False)
    with logged_in(server) as (http, csrf):
        page = http.get(f"/subscribers/{sid}/privacy")
        assert page.status_code == 200
        assert IP in page.text and "=HYPERLINK(" in page.text and "offers" in page.text
        assert AGENT not in page.text  # escaped
        as_csv = http.get(f"/subscribers/{sid}/consent.csv")
        assert [r["ip"] for r in csv.DictReader(io.StringIO(as_csv.text))] == [IP, ""]
        assert http.get(f"/subscribers/{sid}/consent.json").json()["signups"][0]["ip"] == IP

        # A wrong confirmation: refused on the page, nothing erased.
        wrong = http.post(f"/subscribers/{sid}/erase", data={"csrf": csrf, "confirm": "ada"})
        assert wrong.status_code == 422 and "Type their address" in wrong.text
        assert rows_of(conn, sid) == 3
        done = http.post(
            f"/subscribers/{sid}/erase",
            data={"csrf": csrf, "confirm": ADA, "keep_suppressed": "on"},
            follow_redirects=False,
        )
        assert done.status_code == 303 and rows_of(conn, sid) == 0
        assert conn.execute("SELECT count(*) AS n FROM erased_suppressions").fetchone() == {"n": 1}
        gone = http.post(f"/subscribers/{bob}/delete", data={"csrf": csrf}, follow_redirects=False)
        assert gone.status_code == 303 and rows_of(conn, bob) == 0
