"""Bad input in a dashboard URL gets a page, never the API's JSON (issue 35.7):
`/subscribers?q=%00` answered `{"error": …}` where a person expects the dashboard. Each
search and filter parameter of the dashboard is tried with a NUL byte
and other odd values on a real `senddock serve`; the API keeps its JSON shape."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from senddock.web import auth
from support import Conn, new_campaign, seed_list
from test_dashboard import EMAIL, PASSWORD, logged_in
from web_support import Server, make_token, servers

ODD = ["%00", "a%00b", "%ED%A0%80", "%FF", "x" * 5_000]


@pytest.fixture(scope="module")
def shared(pg_url: str) -> Iterator[Server]:
    for started in servers(pg_url):
        yield started(workers=False)


def test_odd_query_values_get_the_dashboard_page_not_json(
    shared: Server, db_url: str, conn: Conn
) -> None:
    seed_list(conn, "news", ["ada@example.org"])
    campaign = new_campaign(conn, "news")
    auth.create_admin(conn, EMAIL, PASSWORD)
    paths = [
        "/subscribers?q={v}",
        "/subscribers?list={v}",
        "/subscribers?page={v}",
        "/suppressions?q={v}",
        "/suppressions?reason={v}",
        "/?page={v}&archived={v}",
        f"/campaigns/{campaign}?q={{v}}",
        f"/campaigns/{campaign}?status={{v}}",
    ]
    with logged_in(shared) as (http, _):
        for path in paths:
            for value in ODD:
                url = path.format(v=value)
                r = http.get(url)
                kind = r.headers.get("content-type", "")
                assert r.status_code < 500, (url, r.status_code, r.text[:300])
                assert kind.startswith("text/html"), (url, r.status_code, kind, r.text[:300])
                assert '{"error"' not in r.text, (url, r.text[:300])
                assert "<html" in r.text.lower(), (url, r.text[:300])
        page = http.get("/subscribers?q=%00")
        assert page.status_code == 422 and "invalid input" in page.text, page.text[:500]
    with shared.client(make_token(db_url)) as api:
        r = api.get("/api/v1/subscribers?q=%00")
        assert r.status_code == 422 and r.json()["error"]["field"] == "q", r.text
