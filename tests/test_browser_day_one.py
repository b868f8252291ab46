"""A new user's first day in a real headless Chromium (issue 35): one subscriber's 10 KB name
must not make the subscribers table wider than the screen for everyone on that page.

Same browser rules as tests/test_browser.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from senddock.web import auth
from support import Conn, seed_list
from test_browser import EMAIL, PASSWORD, chromium, chromium_path, sign_in  # noqa: F401
from web_support import Server, start_server

# 10 KB without a space (no place to wrap), and 10 KB of words.
LONG_NAMES = ("Ž" * 5_000, "lorem ipsum " * 850)


@pytest.fixture
def server(db_url: str, conn: Conn) -> Iterator[Server]:
    auth.create_admin(conn, EMAIL, PASSWORD)
    srv = start_server(db_url, "smtp://127.0.0.1:9?tls=none", workers=False)
    yield srv
    srv.stop()
    print(srv.text())


def test_a_10_kb_name_keeps_the_subscribers_table_within_the_screen(
    chromium_path: str,  # noqa: F811
    server: Server,
    conn: Conn,
) -> None:
    seed_list(conn, "news", ["ada@example.org", "bob@example.org", "cy@example.org"])
    conn.execute(
        "UPDATE subscribers SET name = %s WHERE email = 'ada@example.org'", (LONG_NAMES[0],)
    )
    conn.execute(
        "UPDATE subscribers SET name = %s WHERE email = 'bob@example.org'", (LONG_NAMES[1],)
    )
    problems: list[str] = []
    with chromium(chromium_path, problems, {"width": 1280, "height": 900}) as page:
        sign_in(page, server, "/subscribers")
        table = page.locator(".table-wrap table").bounding_box()
        rows = [r.bounding_box() for r in page.locator(".table-wrap tbody tr").all()]
        wide = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert table is not None and table["width"] <= 1280, table
    assert wide <= 0, f"the page is {wide}px wider than the screen"
    assert all(r is not None and r["height"] < 120 for r in rows), rows  # a few lines each
    assert problems == []
