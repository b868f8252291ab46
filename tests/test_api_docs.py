"""The API's description over real HTTP: /openapi.json and /docs need what the API needs (a
token or a dashboard session), and /docs loads nothing from another host; /redoc is gone."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from senddock.web import auth
from support import Conn
from test_dashboard import EMAIL, PASSWORD, client, logged_in
from web_support import Server, make_token, start_server


@pytest.fixture
def server(db_url: str, conn: Conn) -> Iterator[Server]:
    auth.create_admin(conn, EMAIL, PASSWORD)
    srv = start_server(db_url, "smtp://127.0.0.1:1", workers=False)
    yield srv
    srv.stop()
    print(srv.text())


def references(page: str) -> list[str]:
    """Every URL the page names in src= or href=, or as an absolute http(s) URL anywhere."""
    found = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)["']""", page)
    return found + re.findall(r"""\bhttps?://[^\s"'<>)]+""", page)


def test_the_schema_and_the_docs_pages_are_refused_without_credentials(server: Server) -> None:
    with client(server) as http:
        for headers in ({}, {"Authorization": "Bearer sdk_wrong"}, {"Authorization": "Basic x"}):
            r = http.get("/openapi.json", headers=headers)
            assert r.status_code == 401, (headers, r.text)
            assert r.json()["error"]["field"] is None
            assert "/api/v1" not in r.text
        r = http.get("/docs")  # a browser without a session: to the login form and back
        assert (r.status_code, r.headers["location"]) == (303, "/login?next=/docs")
        assert http.get("/docs", headers={"Authorization": "Bearer sdk_wrong"}).status_code == 401


def test_a_token_or_a_session_gets_the_schema_and_pages_with_local_files_only(
    server: Server, db_url: str
) -> None:
    token = make_token(db_url)
    with server.client(token) as by_token, logged_in(server) as (by_session, _):
        for http in (by_token, by_session):
            spec = http.get("/openapi.json")
            assert spec.status_code == 200, spec.text
            assert spec.json()["info"]["title"] == "SendDock"
            assert "/api/v1/campaigns/{campaign_id}" in spec.json()["paths"]
            page = http.get("/docs")
            assert page.status_code == 200, page.text
            assert "/openapi.json" in page.text and "swagger-ui-bundle.js" in page.text
            urls = references(page.text)
            assert urls, page.text
            for url in urls:
                # Same origin only: a path on this server, never another host.
                assert url.startswith("/") and not url.startswith("//"), url
                assert http.get(url).status_code == 200, url
            assert http.get("/redoc").status_code == 404
