"""Issue 39 item 4: the campaign page's recipients table updates live. In Chromium, against a
real `senddock serve`: the page is open on a campaign whose jobs are pending (no worker); a
real worker then sends them to the catcher, and the rows turn `sent` with their time, without a
reload, the filter kept. (Fails without dashboard.js's `recipients`: the rows stay pending
until the page is reloaded.)"""

from __future__ import annotations

from playwright.sync_api import expect

from senddock.testing import Catcher
from support import Conn, ThreadWorker, send_campaign, unfinished, wait_until
from test_browser import chromium, chromium_path, sign_in, still_server  # noqa: F401
from web_support import Server

EMAILS = ["ünï@example.org", "zoë@bücher.example", "ada@example.org"]


def test_the_recipients_table_turns_sent_without_a_reload(
    chromium_path: str,  # noqa: F811
    still_server: Server,  # noqa: F811
    conn: Conn,
    db_url: str,
    catcher: Catcher,
) -> None:
    cid, bid = send_campaign(conn, "news", EMAILS)
    problems: list[str] = []
    with chromium(chromium_path, problems) as page:
        sign_in(page, still_server, f"/campaigns/{cid}?q=%40")  # a filter every row matches
        rows = page.locator("#recipients tbody tr")
        assert rows.count() == 3
        assert set(page.locator("#recipients tbody .badge").all_inner_texts()) == {"pending"}
        page.evaluate("window.drawnOnce = true")  # gone if the page reloads
        with ThreadWorker(db_url, catcher.url, concurrency=1):
            assert wait_until(lambda: unfinished(conn, bid) == 0, 30)
        badges = page.locator("#recipients tbody .badge")
        expect(badges).to_have_text(["sent"] * 3, timeout=20_000)
        assert page.evaluate("window.drawnOnce") is True  # no reload happened
        assert page.locator("#recipients tbody tr").count() == 3
        assert "q=%40" in page.url
    assert problems == []
