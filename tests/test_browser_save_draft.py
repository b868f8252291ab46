"""Save draft on the campaign form in a real headless Chromium, as a person does it (issue 35,
item 2): type the Markdown, pick a layout, click Save draft once, with no focus trick or
scroll first, and land on the draft, stored once. The live preview runs on its own form, so
its submissions can neither swallow nor replace the save; a second click stores nothing more.

Same browser rules as tests/test_browser.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import suppress

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Route

from senddock.campaigns.layouts import add_layout
from senddock.web import auth
from support import Conn, seed_list
from test_browser import EMAIL, PASSWORD, chromium, chromium_path, sign_in  # noqa: F401
from test_layouts import empty_layouts
from web_support import Server, start_server

MARKDOWN = "# Hallo {{ subscriber.name }}\n\n**neu** im Laden, ünïcödé\n"


@pytest.fixture
def server(db_url: str, conn: Conn) -> Iterator[Server]:
    auth.create_admin(conn, EMAIL, PASSWORD)
    empty_layouts(db_url)
    seed_list(conn, "bücher", ["zoë@bücher.example", "ada@example.org"])
    add_layout(conn, "Laden", "<h2>Laden</h2>{{ content }}", None)
    srv = start_server(db_url, "smtp://127.0.0.1:9?tls=none", workers=False)
    yield srv
    srv.stop()
    print(srv.text())
    empty_layouts(db_url)


def campaigns(conn: Conn) -> list[dict[str, object]]:
    return conn.execute(
        "SELECT c.id, c.name, c.markdown_body, l.name AS layout FROM campaigns c"
        " LEFT JOIN layouts l ON l.id = c.layout_id ORDER BY c.id"
    ).fetchall()


@pytest.mark.parametrize("last", ["markdown", "layout"])
def test_one_click_on_save_draft_after_typing_saves_and_lands_on_the_draft(
    chromium_path: str,  # noqa: F811
    server: Server,
    conn: Conn,
    last: str,
) -> None:
    problems: list[str] = []
    with chromium(chromium_path, problems, {"width": 1280, "height": 900}) as page:
        sign_in(page, server, "/campaigns/new")
        page.get_by_label("Name").first.fill("Bücherbrief")
        page.get_by_label("bücher").check()
        page.locator("input[name=from_addr]").fill("News <news@example.org>")
        page.locator("input[name=subject]").fill("Hallo {{ subscriber.name }}")
        markdown = page.locator("textarea[name=markdown_body]")
        layout = page.locator("select[name=layout]")
        if last == "layout":
            markdown.press_sequentially(MARKDOWN)
            layout.select_option("Laden")
        else:
            layout.select_option("Laden")
            markdown.press_sequentially(MARKDOWN)
        page.get_by_role("button", name="Save draft").click()
        page.wait_for_selector(".badge[data-status=draft]")
        assert "/campaigns/new" not in page.url
    rows = campaigns(conn)
    assert [(r["name"], r["markdown_body"], r["layout"]) for r in rows] == [
        ("Bücherbrief", MARKDOWN, "Laden")
    ]
    assert page.url.endswith(f"/campaigns/{rows[0]['id']}")
    assert problems == []


def test_a_second_click_while_the_save_is_on_its_way_stores_one_draft(
    chromium_path: str,  # noqa: F811
    server: Server,
    conn: Conn,
) -> None:
    """The save's answer is held back, as a slow server's would be, while Save draft is clicked
    again; then every request the browser made reaches the server. Without the form's guard
    the second click's request replaced the first in the browser, but both were stored."""
    held: list[Route] = []
    problems: list[str] = []
    with chromium(chromium_path, problems) as page:
        sign_in(page, server, "/campaigns/new")
        page.route(
            "**/campaigns",
            lambda route: (
                held.append(route) if route.request.method == "POST" else route.fallback()
            ),
        )
        page.get_by_label("Name").first.fill("Zweimal")
        page.get_by_label("bücher").check()
        page.locator("input[name=from_addr]").fill("News <news@example.org>")
        page.locator("input[name=subject]").fill("Hallo")
        page.locator("textarea[name=markdown_body]").press_sequentially("Hallo")
        save = page.get_by_role("button", name="Save draft")
        save.click(no_wait_after=True)
        for _ in range(50):
            if held:
                break
            page.wait_for_timeout(100)
        # The same button again (it has the focus; a locator would wait for the navigation).
        page.keyboard.press("Enter")
        page.wait_for_timeout(1000)
        sent = len(held)
        for route in held:  # every request made reaches the server, as on a slow network
            answer = route.fetch(max_redirects=0)
            with suppress(PlaywrightError):  # a request the browser gave up on
                route.fulfill(response=answer)
        page.wait_for_selector(".badge[data-status=draft]")
    assert sent == 1
    assert [r["name"] for r in campaigns(conn)] == ["Zweimal"]
    assert problems == []
