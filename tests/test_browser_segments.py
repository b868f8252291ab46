"""The campaign form in a real headless Chromium shows how many would receive it, as the lists,
the segment or the filter change, and saves the draft narrowed by them.

Skips without /usr/bin/chromium unless SENDDOCK_REQUIRE_BROWSER is set (as tests/test_browser.py).
"""

from __future__ import annotations

from playwright.sync_api import expect

from senddock.audience import segments
from support import Conn
from test_browser import chromium, chromium_path, sign_in, still_server
from test_segments import seed
from web_support import Server

__all__ = ["chromium_path", "still_server"]  # fixtures shared with tests/test_browser.py

COUNT = "#audience-count"


def test_the_campaign_form_counts_its_audience_as_the_segment_and_filter_change(
    chromium_path: str, still_server: Server, conn: Conn
) -> None:
    seed(conn)
    segments.add(conn, "zürich", 'attributes.city = "Zürich"')
    problems: list[str] = []
    with chromium(chromium_path, problems) as page:
        server = still_server
        sign_in(page, server, "/campaigns/new")
        count = page.locator(COUNT)
        expect(count).to_have_text("Choose a list to see how many will receive it.")
        page.check("input[name=lists][value=news]")
        expect(count).to_have_text("6 subscribers would receive it now.")
        page.select_option("select[name=segment]", "zürich")
        expect(count).to_have_text("1 subscriber would receive it now.")
        page.select_option("select[name=segment]", "")
        page.fill("input[name=filter]", 'attributes.city = "London" and')
        expect(count).to_have_text("segment: expected a field (email, name, created_at,"
                                   " updated_at, attributes.KEY) at column 31")  # fmt: skip
        page.fill("input[name=filter]", 'attributes.city = "London" and created_at >= 2026-01-01')
        expect(count).to_have_text("2 subscribers would receive it now.")

        page.fill("input[name=name]", "Londoners this year")
        page.fill("input[name=from_addr]", "News <news@example.org>")
        page.fill("input[name=subject]", "Hello {{ subscriber.name }}")
        page.fill("textarea[name=text_body]", "Hi {{ subscriber.name }}.")
        page.get_by_role("button", name="Save draft").click()
        page.wait_for_url(server.url + "/campaigns/*")
    row = conn.execute("SELECT audience_filter, segment_id FROM campaigns").fetchone()
    assert row == {
        "audience_filter": 'attributes.city = "London" and created_at >= 2026-01-01',
        "segment_id": None,
    }
    assert problems == []
