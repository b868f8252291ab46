"""Issue 41, item 3 in a real headless Chromium: the navigation counts the unconfirmed
recipients of every campaign, /unconfirmed lists them by campaign, and one click (confirmed in
the browser's dialog) resends them all; the page then says nothing waits.

Unconfirmed jobs are made as a worker and a rescue make them (tests/test_unconfirmed_page.py);
the server runs no workers, so the resent recipients stay queued to be counted.
"""

from __future__ import annotations

from playwright.sync_api import Dialog, sync_playwright

from senddock.web import auth
from support import Conn, jobs, send_campaign
from test_browser import EMAIL, PASSWORD, chromium_path, sign_in
from test_unconfirmed_page import EMPTY, ODD, unconfirm
from web_support import start_server

__all__ = ["chromium_path"]  # the fixture


def test_one_click_resends_every_campaigns_unconfirmed_and_the_page_empties(
    chromium_path: str, conn: Conn, db_url: str
) -> None:
    """Two campaigns, three unconfirmed (one at an odd address, shown as text): the nav's badge
    says 3, the button "Resend the 3 still unconfirmed", the flash what was done, and then the
    empty page and no badge. (Fails without the page and its action.)"""
    auth.create_admin(conn, EMAIL, PASSWORD)
    cid_a, bid_a = send_campaign(conn, "spring", [ODD, "zoë@example.org"], "<i>spring</i>")
    unconfirm(db_url, 2, owner=7)
    cid_b, bid_b = send_campaign(conn, "summer", ["ü@bücher.example"], "summer")
    unconfirm(db_url, 1, owner=8)
    server = start_server(db_url, "smtp://127.0.0.1:1", workers=False)
    problems: list[str] = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium_path)
            page = browser.new_page(viewport={"width": 1200, "height": 1000})
            page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
            dialogs: list[str] = []

            def accept(dialog: Dialog) -> None:
                dialogs.append(dialog.message)
                dialog.accept()

            page.on("dialog", accept)
            page.set_default_timeout(20_000)
            sign_in(page, server, "/unconfirmed")
            nav = page.get_by_role("navigation", name="Main")
            assert nav.get_by_role("link", name="Unconfirmed 3").is_visible()
            blocks = page.locator("section[data-waiting]")
            assert blocks.count() == 2
            assert blocks.nth(0).get_attribute("data-waiting") == str(cid_b)  # newest first
            assert blocks.nth(1).get_attribute("data-waiting") == str(cid_a)
            assert page.get_by_role("link", name="<i>spring</i>").is_visible()
            assert page.get_by_role("cell", name=ODD, exact=True).is_visible()
            assert page.locator("section[data-waiting] tbody tr").count() == 3

            page.get_by_role("button", name="Resend the 3 still unconfirmed").click()
            page.get_by_text("3 unconfirmed recipients of 2 campaigns queued again.").wait_for()
            page.get_by_text(EMPTY).wait_for()
            assert page.locator("section[data-waiting]").count() == 0
            assert page.locator("[data-nav-unconfirmed]").count() == 0
            assert nav.get_by_role("link", name="Unconfirmed", exact=True).is_visible()
            browser.close()
    finally:
        server.stop()
    assert problems == []
    assert dialogs and "Send these 3 recipients again?" in dialogs[0]
    for bid in (bid_a, bid_b):
        assert {str(r["status"]) for r in jobs(conn, bid).values()} <= {"pending", "retry"}
        assert {r["settled_by"] for r in jobs(conn, bid).values()} == {"person"}
