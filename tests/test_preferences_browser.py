"""The preference page in a real headless Chromium (issue 22.5): its forms work under the
page's Content-Security-Policy, with nothing but the buttons a subscriber sees.

Needs Debian's chromium (/usr/bin/chromium); without it the test skips, unless
SENDDOCK_REQUIRE_BROWSER is set.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from senddock.campaigns.compose import link_key
from senddock.config import Settings
from senddock.messages import PREFERENCES, sign
from support import Conn, new_campaign, seed_list
from web_support import ServerFactory, servers

CHROMIUM = Path("/usr/bin/chromium")
ZOE = "zoë@bücher.example"


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    yield from servers(db_url)


DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_a_subscriber_leaves_a_list_then_everything_in_a_real_browser(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    if not CHROMIUM.exists():
        if os.environ.get("SENDDOCK_REQUIRE_BROWSER"):
            pytest.fail(f"{CHROMIUM} is missing and SENDDOCK_REQUIRE_BROWSER is set")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    for name in ("news", "offers"):
        seed_list(conn, name, [ZOE])
    row = conn.execute("SELECT id FROM subscribers").fetchone()
    assert row is not None
    cid = new_campaign(conn, "news")
    token = sign(link_key(conn, Settings(database_url=db_url)), PREFERENCES, row["id"], cid)
    server = serve(workers=False)

    problems: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM))
        page = browser.new_page()
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        page.on(
            "console",
            lambda m: (
                problems.append(m.text)
                if m.type == "error" and "favicon" not in m.location.get("url", "")  # none served
                else None
            ),
        )
        page.set_default_timeout(20_000)
        page.goto(f"{server.url}/preferences/{token}")
        page.get_by_role("heading", name="Your subscriptions").wait_for()
        assert ZOE in page.content()
        # The public pages' style applies (its hash is in the page's policy): a card.
        card = page.locator("main").evaluate("e => getComputedStyle(e).borderTopLeftRadius")
        assert card == "12px"
        page.set_viewport_size({"width": 390, "height": 760})
        page.screenshot(path=str(DOCS / "public-preferences-phone.png"))

        page.get_by_role("row", name=re.compile("news")).get_by_role("button", name="Leave").click()
        page.get_by_text("You left news.").wait_for()
        news = page.get_by_role("row", name=re.compile("news"))
        assert news.get_by_role("button", name="Join").count() == 1

        page.get_by_role("button", name="Unsubscribe from everything").click()
        page.get_by_text("You are unsubscribed from everything.", exact=True).wait_for()
        browser.close()
    assert problems == []
    rows = conn.execute("SELECT action FROM subscription_events ORDER BY id").fetchall()
    assert [r["action"] for r in rows] == ["leave", "unsubscribe_all"]
    assert conn.execute("SELECT reason FROM suppressions").fetchall() == [{"reason": "unsubscribe"}]
