"""A list is renamed and described from the CLI and the API as on the dashboard (issue 22,
part 7): `lists set NAME --rename NEW --description TEXT`, POST/PATCH /api/v1/lists with
`name` and `description`; a taken or empty name is refused in one line and changes nothing;
a description is text, escaped on the dashboard."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from senddock.web import auth
from support import Conn, seed_list, senddock, worker_env
from test_dashboard import EMAIL, PASSWORD, logged_in
from web_support import Server, make_token, servers

NEW_NAME = "Leseratten — Zürich"
SCRIPT = '<script>alert("ü")</script> Ein Buch im Monat'


def list_row(conn: Conn, list_id: int) -> dict[str, Any]:
    row = conn.execute(
        "SELECT name, description, double_opt_in, from_addr FROM lists WHERE id = %s", (list_id,)
    ).fetchone()
    assert row is not None, f"no list {list_id}"
    return row


def refused(done: Any, words: str) -> None:
    """A CLI refusal: exit code != 0 and one line on stderr saying `words`."""
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], done.stderr


def test_the_cli_renames_and_describes_a_list_and_refuses_a_taken_or_empty_name(
    db_url: str, conn: Conn
) -> None:
    """Fails without --rename/--description (a usage error) and without the description in
    `lists show`."""
    env = worker_env(db_url, "smtp://127.0.0.1:1?tls=none")
    news = seed_list(conn, "news", ["zoë@bücher.example"])
    seed_list(conn, "taken", [])

    done = senddock(
        env,
        "lists",
        "set",
        "news",
        "--rename",
        f"  {NEW_NAME} ",
        "--description",
        SCRIPT + "\nZweite Zeile",
        "--double-opt-in",
        "--from",
        "Zoë <zoë@bücher.example>",
    )
    assert done.returncode == 0, done.stderr
    assert NEW_NAME in done.stdout
    assert list_row(conn, news) == {
        "name": NEW_NAME,
        "description": SCRIPT + "\nZweite Zeile",
        "double_opt_in": True,
        "from_addr": "Zoë <zoë@bücher.example>",
    }
    shown = senddock(env, "lists", "show").stdout
    assert f"{NEW_NAME}: 1 confirmed, 0 unconfirmed, 0 unsubscribed  double opt-in" in shown
    assert f"\n  {SCRIPT}\n  Zweite Zeile\n" in shown

    before = list_row(conn, news)
    # A name another list has: one line naming it, nothing changed (the description neither).
    refused(
        senddock(env, "lists", "set", NEW_NAME, "--rename", "taken", "--description", "x"),
        "there already is a list named 'taken'",
    )
    refused(senddock(env, "lists", "set", NEW_NAME, "--rename", "   "), "a list needs a name")
    refused(senddock(env, "lists", "set", "nobody", "--rename", "new"), "no list named 'nobody'")
    assert list_row(conn, news) == before
    # Rename and options in one transaction: double opt-in without a From undoes the rename.
    plain = seed_list(conn, "plain", [])
    refused(
        senddock(env, "lists", "set", "plain", "--rename", "Schlicht", "--double-opt-in"),
        "needs --from",
    )
    assert list_row(conn, plain)["name"] == "plain"
    assert conn.execute("SELECT count(*) AS n FROM lists").fetchone() == {"n": 3}

    # '' clears the description; nothing else moves.
    assert senddock(env, "lists", "set", NEW_NAME, "--description", "").returncode == 0
    assert list_row(conn, news) == {**before, "description": ""}
    lines = senddock(env, "lists", "show").stdout.splitlines()
    assert len(lines) == 3 and not any(line.startswith(" ") for line in lines)


@pytest.fixture(scope="module")
def shared(pg_url: str) -> Iterator[Server]:
    """One `senddock serve` (no workers) for the API and dashboard tests."""
    for started in servers(pg_url):
        yield started(workers=False)


@pytest.fixture
def api(shared: Server, db_url: str) -> Iterator[httpx.Client]:
    with shared.client(make_token(db_url)) as c:
        yield c


def error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    return dict(r.json()["error"])


def test_the_api_creates_renames_and_describes_a_list_and_the_dashboard_escapes_it(
    api: httpx.Client, shared: Server, conn: Conn
) -> None:
    """Fails without `description` on POST, `name`/`description` on PATCH (422: unknown
    fields) and on ListInfo."""
    seed_list(conn, "taken", [])
    made = api.post("/api/v1/lists", json={"name": "Bücher", "description": SCRIPT})
    assert made.status_code == 201, made.text
    lid = made.json()["id"]
    assert made.json()["description"] == SCRIPT
    assert list_row(conn, lid)["description"] == SCRIPT

    renamed = api.patch(f"/api/v1/lists/{lid}", json={"name": NEW_NAME})
    assert renamed.status_code == 200, renamed.text
    assert (renamed.json()["name"], renamed.json()["description"]) == (NEW_NAME, SCRIPT)
    listed = {i["name"]: i["description"] for i in api.get("/api/v1/lists").json()}
    assert listed == {NEW_NAME: SCRIPT, "taken": ""}

    before = list_row(conn, lid)
    taken = error(api.patch(f"/api/v1/lists/{lid}", json={"name": "taken", "description": ""}), 409)
    assert taken["field"] == "name" and "'taken'" in taken["message"]
    blank = error(api.patch(f"/api/v1/lists/{lid}", json={"name": "  "}), 422)
    assert blank["field"] == "name" and "needs a name" in blank["message"]
    assert api.patch(f"/api/v1/lists/{lid}", json={"name": ""}).status_code == 422
    long = error(api.patch(f"/api/v1/lists/{lid}", json={"description": "ü" * 2_001}), 422)
    assert long["field"] == "description"
    # One transaction: the rename goes back with the refused double opt-in (no From yet).
    no_from = error(
        api.patch(f"/api/v1/lists/{lid}", json={"name": "Neu", "double_opt_in": True}), 422
    )
    assert no_from["field"] == "from_addr"
    assert list_row(conn, lid) == before
    # A POST naming a list that exists keeps the upsert: its description changes, no new list.
    again = api.post("/api/v1/lists", json={"name": NEW_NAME, "description": "  Neu  "})
    assert again.status_code == 201 and again.json()["id"] == lid
    assert again.json()["description"] == "Neu"
    assert error(api.post("/api/v1/lists", json={"name": " \t "}), 422)["field"] == "name"

    # The dashboard shows what the API stored as text; its own edit goes the same way.
    assert api.patch(f"/api/v1/lists/{lid}", json={"description": SCRIPT}).status_code == 200
    auth.create_admin(conn, EMAIL, PASSWORD)
    with logged_in(shared) as (http, csrf):
        page = http.get(f"/lists/{lid}").text
        assert "&lt;script&gt;" in page and "<script>alert" not in page
        assert NEW_NAME in page
        saved = http.post(
            f"/lists/{lid}", data={"csrf": csrf, "name": "Bücherwurm", "description": ""}
        )
        assert saved.status_code == 303, saved.text
    cleared = api.get(f"/api/v1/lists/{lid}").json()
    assert (cleared["name"], cleared["description"]) == ("Bücherwurm", "")
