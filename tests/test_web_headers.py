"""What any client sees of a real `senddock serve` process, whatever it asks: security headers
on every answer, an Allow header on every 405, a /readyz that names the failed check and not
the database, and no password made of spaces (issue 19.8)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest

import forkserver
from senddock.campaigns.compose import link_key
from senddock.config import Settings
from senddock.messages import UNSUBSCRIBE, sign
from support import Conn, seed_list, wait_until, worker_env
from web_support import ServerFactory, make_admin, make_token, servers

EMAIL, PASSWORD = "admin@example.org", "correct horse battery staple"


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    yield from servers(db_url)


@contextmanager
def signed_in(url: str) -> Iterator[httpx.Client]:
    """A cookie-keeping client signed in through the login form."""
    with httpx.Client(base_url=url, timeout=30) as c:
        yield from _sign_in(c)


def _sign_in(c: httpx.Client) -> Iterator[httpx.Client]:
    form = c.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None, form.text
    r = c.post("/login", data={"email": EMAIL, "password": PASSWORD, "csrf": csrf.group(1)})
    assert r.status_code == 303, r.text
    yield c


def test_every_answer_carries_csp_nosniff_and_no_framing(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    seed_list(conn, "news", ["ada@example.org"])
    make_admin(db_url, EMAIL, PASSWORD)
    server = serve(workers=False)
    token = make_token(db_url)
    sid = conn.execute("SELECT id FROM subscribers").fetchone()
    assert sid is not None
    unsubscribe = "/unsubscribe/" + sign(link_key(conn, Settings()), UNSUBSCRIBE, sid["id"], 1)
    bearer = {"Authorization": f"Bearer {token}"}
    answers = [
        httpx.get(server.url + "/healthz"),
        httpx.get(server.url + "/readyz"),
        httpx.get(server.url + "/login"),
        httpx.get(server.url + "/static/dashboard.js"),
        httpx.get(server.url + "/nowhere"),
        httpx.get(server.url + unsubscribe),
        httpx.post(server.url + "/unsubscribe/forged"),
        httpx.get(server.url + "/api/v1/lists"),  # 401
        httpx.get(server.url + "/api/v1/lists", headers=bearer),
        httpx.get(server.url + "/api/v1/campaigns/99", headers=bearer),  # 404
        httpx.post(server.url + "/api/v1/lists", headers=bearer, json={}),  # 422
        httpx.post(server.url + "/login", content=b"x" * 100_000),  # 413
        httpx.delete(server.url + "/healthz"),  # 405
        httpx.get(server.url + "/metrics", headers=bearer),
        httpx.get(server.url + "/docs", headers=bearer),
        httpx.get(server.url + "/openapi.json", headers=bearer),
    ]
    with signed_in(server.url) as c:
        answers += [c.get("/"), c.get("/lists")]
        with c.stream("GET", "/events/workers") as events:
            answers.append(events)
    for r in answers:
        where = f"{r.request.method} {r.request.url.path} -> {r.status_code}"
        assert r.headers.get("x-content-type-options") == "nosniff", where
        assert r.headers.get("x-frame-options") == "DENY", where
        assert r.headers.get("referrer-policy") == "same-origin", where
        csp = r.headers.get("content-security-policy", "")
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp, where
        assert "'unsafe-inline'" not in csp and "'unsafe-eval'" not in csp, where
        assert "object-src 'none'" in csp, where
    # What the policy allows inline is exactly the blocks these pages carry.
    page = httpx.get(server.url + unsubscribe)
    assert "<style>" in page.text and "'sha256-" in page.headers["content-security-policy"]
    dashboard = answers[-3]  # /
    assert dashboard.status_code == 200 and "<script>" not in dashboard.text
    assert " style=" not in dashboard.text


def test_a_405_names_the_methods_the_path_allows(db_url: str, serve: ServerFactory) -> None:
    server = serve(workers=False)
    token = make_token(db_url)
    bearer = {"Authorization": f"Bearer {token}"}
    cases = [
        ("DELETE", "/healthz", {}, "GET"),
        ("PUT", "/unsubscribe/anything", {}, "GET, POST"),
        ("DELETE", "/login", {}, "GET, POST"),
        ("PUT", "/api/v1/campaigns/1", bearer, "GET, PATCH, DELETE"),
        ("PUT", "/api/v1/lists", bearer, "GET, POST"),
        ("DELETE", "/api/v1/subscribers/1/", bearer, None),  # no such path: 404, no Allow
        ("POST", "/static/dashboard.js", {}, "GET, HEAD"),
    ]
    for method, path, headers, allow in cases:
        r = httpx.request(method, server.url + path, headers=headers)
        if allow is None:
            assert r.status_code in (404, 307), (method, path, r.status_code)
            continue
        assert r.status_code == 405, (method, path, r.status_code, r.text)
        assert r.headers.get("allow") == allow, (method, path, r.headers)
        if path.startswith("/api/"):
            assert set(r.json()["error"]) == {"field", "message"}


# A database error whose text names a host and a database, as a failed connection's does.
SECRET = "connection to server at db.internal.example (10.1.2.3), port 5432 failed: secretdb"
BREAK_READYZ = f"""
ALTER TABLE schema_migrations RENAME TO schema_migrations_away;
CREATE FUNCTION readyz_fails() RETURNS SETOF integer LANGUAGE plpgsql
AS $$ BEGIN RAISE EXCEPTION '{SECRET}'; END $$;
CREATE VIEW schema_migrations AS SELECT readyz_fails() AS version;
"""
MEND_READYZ = """
DROP VIEW schema_migrations; DROP FUNCTION readyz_fails();
ALTER TABLE schema_migrations_away RENAME TO schema_migrations;
"""


def test_readyz_names_the_failed_check_not_the_database_error(
    conn: Conn, serve: ServerFactory
) -> None:
    server = serve(workers=False)
    assert httpx.get(server.url + "/readyz").json()["ready"] is True
    conn.execute(BREAK_READYZ)
    try:
        r = httpx.get(server.url + "/readyz")
    finally:
        conn.execute(MEND_READYZ)
    assert r.status_code == 503
    body = r.json()
    assert (body["ready"], body["database"], body["migrations"]) == (False, False, False)
    for secret in ("db.internal.example", "10.1.2.3", "secretdb", str(conn.info.dbname)):
        assert secret not in r.text, r.text
    # The detail is in the server's log, for the operator.
    assert wait_until(lambda: SECRET in server.text(), timeout=5)
    assert httpx.get(server.url + "/readyz").status_code == 200


@pytest.mark.parametrize("password", [" " * 10, " " * 30, "\t" * 12, "a" + " " * 9, " ab " * 2])
def test_a_password_of_spaces_is_refused(db_url: str, password: str) -> None:
    env = worker_env(db_url, "smtp://127.0.0.1:1")
    done = forkserver.run(["admin", "create", "--email", EMAIL], env, input=password + "\n")
    assert done.returncode != 0, done.stdout
    assert "password" in done.stderr.lower()


TWO_FROMS = ["a@example.org, b@example.org", "News <a@example.org>, Other <b@example.org>"]


def test_a_from_with_two_addresses_is_refused_at_create(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    seed_list(conn, "news", ["ada@example.org"])
    make_admin(db_url, EMAIL, PASSWORD)
    server = serve(workers=False)
    campaign = {"name": "x", "lists": ["news"], "subject": "Hi", "text_body": "Hello"}
    with server.client(make_token(db_url)) as c:
        for two in TWO_FROMS:
            r = c.post("/api/v1/campaigns", json={**campaign, "from_addr": two})
            assert r.status_code == 422, r.text
            assert r.json()["error"]["field"] == "from_addr", r.text
        one = c.post("/api/v1/campaigns", json={**campaign, "from_addr": '"Doe, J" <j@x.org>'})
        assert one.status_code == 201, one.text
    with signed_in(server.url) as c:
        page = c.get("/campaigns/new")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        form = {"csrf": csrf.group(1), "name": "y", "lists": "news", "subject": "Hi"}
        form |= {"from_addr": TWO_FROMS[0], "text_body": "Hello"}
        r = c.post("/campaigns", data=form)
        assert r.status_code == 422 and "one From address" in r.text, r.text[:500]
    row = conn.execute("SELECT count(*) AS n FROM campaigns").fetchone()
    assert row is not None and row["n"] == 1


def test_live_streams_are_capped_per_session_and_end_after_their_lifetime(
    db_url: str, serve: ServerFactory
) -> None:
    make_admin(db_url, EMAIL, PASSWORD)
    server = serve(workers=False, env={"SENDDOCK_STREAM_SECONDS": "3"})
    with signed_in(server.url) as c, ExitStack() as held:
        opened = [held.enter_context(c.stream("GET", "/events/workers")) for _ in range(5)]
        assert [r.status_code for r in opened] == [200] * 5
        extra = c.get("/events/workers")
        assert extra.status_code == 429, extra.text[:300]
        # A stream ends by itself after its lifetime (the browser reconnects).
        started = time.monotonic()
        for r in opened:
            for _ in r.iter_bytes():
                pass
        assert time.monotonic() - started < 10
    with signed_in(server.url) as c:
        # The ended streams gave their slots back.
        def free() -> bool:
            with c.stream("GET", "/events/workers") as r:
                return r.status_code == 200

        assert wait_until(free, timeout=10)
