"""CSV imports through a real `senddock serve` process: one bad row is reported by its line
and the rest imported; a file that cannot be read as a whole is refused in one line."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from senddock.web import auth
from support import Conn, wait_until
from test_dashboard import EMAIL, PASSWORD, logged_in
from web_support import ServerFactory, make_token, servers


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    yield from servers(db_url)


def run_import(c: httpx.Client, data: bytes) -> dict[str, Any]:
    """Upload `data` to list "people" and wait for the job to end: its last state."""
    r = c.post("/api/v1/imports", data={"list": "people"}, files={"file": ("p.csv", data)})
    assert r.status_code == 202, r.text
    job = r.json()["id"]
    last: dict[str, Any] = {}

    def ended() -> bool:
        nonlocal last
        last = c.get(f"/api/v1/imports/{job}").json()
        return last["status"] in ("done", "failed")

    assert wait_until(ended, timeout=60, every=0.1)
    return last


def test_each_bad_row_is_reported_by_its_line_and_the_rest_imported(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    server = serve(workers=False)
    deep = "[" * 5_000 + "]" * 5_000
    rows = [
        b"email,name,attributes",
        b"a1@example.org,One,",
        b'a2@example.org,Deep,"{""x"": ' + deep.encode() + b'}"',  # line 3
        b"a3@example.org,Ren\xe9,",  # line 4: Latin-1, not UTF-8
        b"a4@example.org," + b"x" * 200_000 + b",",  # line 5: a 200 KB field
        b"a5@example.org,Big," + b'"' + b"y" * 17_000_000 + b'"',  # line 6: past csv's limit
        b'a6@example.org,Six,"{""a"":\n1}"',  # lines 7-8: one row
        b"a7@example.org,Seven,",  # line 9
    ]
    with server.client(make_token(db_url)) as c:
        job = run_import(c, b"\n".join(rows) + b"\n")
    assert job["status"] == "done", job
    reasons = {e["line"]: e["reason"] for e in job["errors"]}
    assert sorted(reasons) == [3, 4, 5, 6], job["errors"]
    assert "deeper than 32 levels" in reasons[3]
    assert "not UTF-8" in reasons[4] and "0xE9" in reasons[4]
    assert "longer than 64 KiB" in reasons[5]
    assert (job["imported"], job["rejected"]) == (3, 4)
    found = conn.execute("SELECT email FROM subscribers ORDER BY email").fetchall()
    assert [r["email"] for r in found] == ["a1@example.org", "a6@example.org", "a7@example.org"]


def test_a_header_naming_a_column_twice_is_refused_naming_it(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    server = serve(workers=False)
    with server.client(make_token(db_url)) as c:
        job = run_import(c, b"email,city,name,City\nada@example.org,Paris,Ada,Lyon\n")
    assert job["status"] == "failed", job
    assert job["error"] == "the file: the header row names the column 'city' twice"
    row = conn.execute("SELECT count(*) AS n FROM subscribers").fetchone()
    assert row is not None and row["n"] == 0


def test_a_runaway_quote_fails_the_job_naming_its_line_and_imports_nothing(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    """As `subscribers import` refuses it (tests/test_import_exports.py): the upload's job
    fails with the line, and not one row of the file is imported. Fails without the fix:
    the job was `done`: Ada imported, the other 101 rows lost as one rejected row."""
    server = serve(workers=False)
    rows = [b"email,name", b"ada@example.org,Ada", b'bob@example.org,"Bob']
    rows += [b"user%d@example.org,User %d" % (i, i) for i in range(100)]
    with server.client(make_token(db_url)) as c:
        job = run_import(c, b"\r\n".join(rows) + b"\r\n")
    assert job["status"] == "failed", job
    assert job["error"].startswith("the file:3: a quote opened in this row"), job
    assert job["error"].endswith("nothing was imported"), job
    assert (job["rows_read"], job["imported"], job["rejected"]) == (0, 0, 0)
    row = conn.execute("SELECT count(*) AS n FROM subscribers").fetchone()
    assert row is not None and row["n"] == 0


def test_the_dashboard_upload_of_a_runaway_quote_shows_the_line_and_imports_nothing(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    """The dashboard's upload is the same job: its page shows the refusal. Fails without
    the fix: the job ended `done` with Ada imported."""
    server = serve(workers=False)
    auth.create_admin(conn, EMAIL, PASSWORD)
    data = b'email,name\nada@example.org,Ada\nbob@example.org,"Bob\ncy@example.org,Cy\n'
    with logged_in(server) as (http, csrf):
        r = http.post(
            "/lists/import",
            data={"csrf": csrf, "list_name": "news"},
            files={"file": ("people.csv", data, "text/csv")},
        )
        assert r.status_code == 303, r.text
        job = int(r.headers["location"].rsplit("/", 1)[1])

        def ended() -> bool:
            row = conn.execute("SELECT status FROM import_jobs WHERE id = %s", (job,)).fetchone()
            return row is not None and row["status"] in ("done", "failed")

        assert wait_until(ended, timeout=60, every=0.1)
        page = http.get(f"/imports/{job}").text
    assert "the file:3: a quote opened in this row" in page, page
    assert "nothing was imported" in page
    row = conn.execute("SELECT status, imported FROM import_jobs WHERE id = %s", (job,)).fetchone()
    assert row == {"status": "failed", "imported": 0}
    assert conn.execute("SELECT count(*) AS n FROM subscribers").fetchone() == {"n": 0}
