"""The live campaign page says when its stream is lost, and comes back by itself (issue 33).

A real Chromium on a campaign page; the `senddock serve` behind it is stopped (SIGTERM) and a
new one started on the same port. The page shows "connection lost" while no server answers,
then "on" again, and a change made meanwhile (the campaign cancelled from the CLI) reaches the
page without a reload. Before issue 33 the page showed nothing when its stream ended and never
opened it again once the browser gave up (its badge stayed `sending`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import sync_playwright

from senddock.web import auth
from support import Conn, send_campaign, senddock, worker_env
from test_browser import EMAIL, PASSWORD, chromium_path  # noqa: F401  (a fixture)
from web_support import Server, free_port, start_server

STREAM = "[data-stream]"


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def first(db_url: str, conn: Conn, port: int) -> Iterator[Server]:
    auth.create_admin(conn, EMAIL, PASSWORD)
    srv = start_server(db_url, "smtp://127.0.0.1:1", workers=False, port=port)
    yield srv
    srv.stop()


def test_the_campaign_page_says_its_stream_is_lost_and_reconnects(
    chromium_path: str,  # noqa: F811
    db_url: str,
    conn: Conn,
    port: int,
    first: Server,
) -> None:
    cid, _ = send_campaign(conn, "news", ["ann@example.org", "bob@example.org"])
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path)
        page = browser.new_page()
        page.set_default_timeout(30_000)
        page.goto(first.url + "/login")
        page.get_by_label("Email").fill(EMAIL)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("heading", name="Campaigns").wait_for()
        page.goto(f"{first.url}/campaigns/{cid}")
        page.wait_for_selector(f"{STREAM}[data-state=live]")
        page.evaluate("window.notReloaded = true")

        assert first.stop() == 0
        page.wait_for_selector(f"{STREAM}[data-state=lost]")
        assert "connection lost" in (page.text_content(STREAM) or "")

        done = senddock(worker_env(db_url, "smtp://127.0.0.1:1"), "campaign", "cancel", str(cid))
        assert done.returncode == 0, done.stderr
        second = start_server(db_url, "smtp://127.0.0.1:1", workers=False, port=port)
        try:
            page.wait_for_selector(f"{STREAM}[data-state=live]", timeout=60_000)
            page.wait_for_selector(".campaign h1 .badge[data-status=cancelled]")
            assert page.evaluate("window.notReloaded") is True
        finally:
            second.stop()
        browser.close()
