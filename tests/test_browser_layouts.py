"""Layouts in a real headless Chromium: add a default layout on the Layouts page, write a
campaign in Markdown and watch the live preview render it inside that layout in a sandboxed
frame, save it, and see the layout's delete refused while the campaign uses it.

Same browser rules as tests/test_browser.py (skips without /usr/bin/chromium unless
SENDDOCK_REQUIRE_BROWSER is set).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from senddock.web import auth
from support import Conn, seed_list
from test_browser import EMAIL, PASSWORD, chromium, chromium_path, sign_in  # noqa: F401
from test_layouts import empty_layouts
from web_support import Server, start_server

LAYOUT = (
    "<header><h2>Bücherpost</h2></header>\n{{ content }}\n"
    '<footer><a href="{{ unsubscribe_url }}">Abmelden</a></footer>'
)
MARKDOWN = (
    "# Hallo {{ subscriber.name }}\n\n"
    "<script>parent.document.title = 'ran'</script>\n\n**neu** im Laden\n"
)


@pytest.fixture
def server(db_url: str, conn: Conn) -> Iterator[Server]:
    auth.create_admin(conn, EMAIL, PASSWORD)
    empty_layouts(db_url)
    seed_list(conn, "bücher", ["zoë@bücher.example"])
    conn.execute("UPDATE subscribers SET name = 'Zoë <b>x</b>'")
    srv = start_server(db_url, "smtp://127.0.0.1:9?tls=none", workers=False)
    yield srv
    srv.stop()
    print(srv.text())
    empty_layouts(db_url)  # a default layout left behind would wrap later tests' campaigns


def test_live_preview_renders_markdown_in_the_default_layout_in_a_sandboxed_frame(
    chromium_path: str,  # noqa: F811
    server: Server,
    conn: Conn,
) -> None:
    problems: list[str] = []
    with chromium(chromium_path, problems, {"width": 1200, "height": 1400}) as page:
        sign_in(page, server, "/layouts")  # the login brings the browser back
        page.get_by_role("heading", name="Layouts").wait_for()

        # A layout through its form (below the starters' gallery); a broken one first is
        # refused in one line.
        form = page.locator("form[action='/layouts']")
        form.locator("input[name=name]").fill("Bücher")
        form.locator("textarea[name=html_body]").fill("<p>no slot</p>")
        form.get_by_role("button", name="Save layout").click()
        assert "{{ content }}" in page.text_content("[role=alert]")  # type: ignore[operator]
        form.locator("textarea[name=html_body]").fill(LAYOUT)
        form.locator("input[name=is_default]").check()
        form.get_by_role("button", name="Save layout").click()
        page.wait_for_selector("tr[data-layout='Bücher'] .badge")

        # The campaign form previews as it is typed, in the default layout.
        page.goto(server.url + "/campaigns/new")
        page.fill("input[name=name]", "Markdown")
        page.check("input[name=lists][value=bücher]")
        page.fill("input[name=from_addr]", "News <news@example.org>")
        page.fill("input[name=subject]", "Hallo {{ subscriber.name }}")
        page.fill("textarea[name=markdown_body]", MARKDOWN)
        frame_el = page.locator("iframe[name=preview]")
        # No scripts (its origin is kept: an opaque one got a process of its own in Chromium,
        # which took a click on Save draft just after a scroll, issue 35).
        assert frame_el.get_attribute("sandbox") == "allow-same-origin"
        frame = page.frame(name="preview")
        assert frame is not None
        frame.wait_for_selector("text=Hallo Zoë <b>x</b>")  # the name escaped, as text
        body = frame.text_content("body") or ""
        assert "Bücherpost" in body and "Abmelden" in body
        assert "<script>parent.document.title = 'ran'</script>" in body  # shown, not run
        assert frame.locator("strong").text_content() == "neu"
        assert frame.locator("h1 b").count() == 0
        assert page.title() != "ran"

        # One click saves, straight from the Markdown field (issue 35).
        page.get_by_role("button", name="Save draft").click()
        page.wait_for_selector(".badge[data-status=draft]")
        rows = conn.execute("SELECT layout_id, markdown_body FROM campaigns").fetchall()
        assert [(r["layout_id"], r["markdown_body"]) for r in rows] == [(1, MARKDOWN)]

        # In use: the delete is refused with the reason.
        page.goto(server.url + "/layouts")
        page.locator("tr[data-layout='Bücher']").get_by_role("button", name="Delete").click()
        page.wait_for_selector(".flash.error")
        assert "used by 1 campaign" in (page.text_content(".flash.error") or "")
    assert problems == []
