"""The dashboard's day-one forms in a real headless Chromium (issue 22 part 7): create and
rename a list, add a subscriber, edit them, put them on the list, and see the message a
broadcast sent them on their page. Skips without /usr/bin/chromium (fails under CI's
SENDDOCK_REQUIRE_BROWSER), as tests/test_browser.py does.
"""

from __future__ import annotations

from playwright.sync_api import expect

from senddock.campaigns import broadcast
from senddock.campaigns.broadcast import enqueue_all
from senddock.testing import Catcher
from support import Conn, ThreadWorker, new_campaign, unfinished, wait_until
from test_browser import ARTIFACTS, chromium, chromium_path, sign_in, still_server  # noqa: F401
from web_support import Server

ZOE = "zoë@bücher.example"


def test_a_day_on_the_dashboard_list_subscriber_edit_join_and_history(
    chromium_path: str,  # noqa: F811
    still_server: Server,  # noqa: F811
    conn: Conn,
    catcher: Catcher,
    db_url: str,
) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    with chromium(chromium_path, problems) as page:
        sign_in(page, still_server, "/lists")

        # A new list, then renamed and described on its own page.
        page.get_by_text("New list").click()
        page.locator("[name=name]").fill("Leseratten")
        page.get_by_role("button", name="Create list").click()
        page.get_by_role("heading", name="List Leseratten").wait_for()
        page.locator("[name=name]").fill("Bücherwürmer")
        page.locator("[name=description]").fill("Ein Buch im Monat")
        page.get_by_role("button", name="Save list").click()
        page.get_by_role("heading", name="List Bücherwürmer").wait_for()
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Lists").click()
        expect(page.locator("table")).to_contain_text("Bücherwürmer")
        expect(page.locator("table")).to_contain_text("Ein Buch im Monat")

        # A subscriber, added, edited, and put on the list.
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Subscribers").click()
        page.get_by_role("link", name="Add a subscriber").click()
        page.locator("[name=email]").fill(ZOE)
        page.locator("[name=name]").fill("Zoë")
        page.locator("[name=attributes]").fill('{"city": "Zürich"}')
        page.get_by_role("button", name="Add subscriber").click()
        page.locator("h1[data-field=email]").wait_for()
        page.locator("[name=name]").fill("Zoë Bücher")
        page.locator("[name=attributes]").fill('{"city": "Köln"}')
        page.get_by_role("button", name="Save").click()
        expect(page.locator(".flash")).to_have_text("Saved.")
        page.get_by_label("Join a list").select_option("Bücherwürmer")
        page.get_by_role("button", name="Join").click()
        expect(page.locator("tr[data-list='Bücherwürmer']")).to_contain_text("confirmed")
        row = conn.execute(
            "SELECT id, name, attributes FROM subscribers WHERE lower(email) = lower(%s)",
            (ZOE,),
        ).fetchone()
        assert row is not None
        assert (row["name"], row["attributes"]) == ("Zoë Bücher", {"city": "Köln"})

        # A broadcast to the renamed list reaches them; their page shows the message.
        cid = new_campaign(conn, "Bücherwürmer", name="Herbstlese")
        bid, _, _ = broadcast(conn, cid)
        enqueue_all(conn, bid)
        with ThreadWorker(db_url, catcher.url):
            assert wait_until(lambda: unfinished(conn, bid) == 0)
        page.reload()
        history = page.locator("#history")
        expect(history).to_contain_text("Herbstlese")
        expect(history.locator(".badge")).to_have_text("sent")
        expect(history).to_contain_text("250")
        page.screenshot(path=str(ARTIFACTS / "subscriber-day.png"), full_page=True)
    assert problems == []
    assert catcher.received_count() == 1
