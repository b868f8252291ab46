"""Issue 41 in a real headless Chromium: the campaign page lists the unconfirmed recipients
with what each source said, asks the relay, and resends in one action the ones no source saw.

The unconfirmed jobs are real (the catcher keeps each `lost-*` message and hangs up before
its 250); the source is Mailgun's events API answered by tests/test_reconcile_providers.py's
local server. The server's own workers send the resent ones to the same catcher.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import sync_playwright

from senddock.campaigns import status
from senddock.testing import Catcher
from senddock.web import auth
from support import Conn, ThreadWorker, jobs, send_campaign, wait_until
from test_browser import EMAIL, PASSWORD, chromium_path, sign_in
from test_reconcile_providers import MAILGUN, Providers
from test_unconfirmed import HOLD, _lose_reply
from web_support import Server, start_server

__all__ = ["chromium_path"]  # the fixture

UNSEEN = ("lost-ann@example.com", "lost-bob@example.com")


@pytest.fixture
def providers() -> Iterator[Providers]:
    server = Providers()
    yield server
    server.http.shutdown()


def test_the_campaign_page_asks_the_relay_then_resends_the_ones_no_source_saw(
    chromium_path: str, conn: Conn, db_url: str, providers: Providers
) -> None:
    """Three unconfirmed: "Ask the relay" confirms the one Mailgun saw accepted; the table
    shows "mailgun: not seen" for the other two; "Resend the 2 still unconfirmed" (a form
    with the CSRF token) queues them again and the campaign ends sent, each of the two with a
    second copy at the server and the seen one with one. A POST without the token is refused.
    (Fails without the page's reconcile and resend-unseen actions.)"""
    auth.create_admin(conn, EMAIL, PASSWORD)
    with Catcher(fault_for=_lose_reply) as catcher:
        cid, bid = send_campaign(conn, "news", [MAILGUN, *UNSEEN, "fine@example.com"])
        with ThreadWorker(db_url, catcher.url, concurrency=1, retry_schedule=HOLD):
            assert wait_until(lambda: status(conn, cid).counts.unconfirmed == 3, 30)
        rows = jobs(conn, bid)
        for email in (MAILGUN, *UNSEEN):
            providers.message_ids[email] = rows[email]["message_id"]
            providers.dots[email] = rows[email]["dot_at"]
        providers.message_ids["lost-rejected@example.com"] = "<none>"
        env = {
            "SENDDOCK_MAILGUN_API_KEY": "key-mailgun-secret",
            "SENDDOCK_MAILGUN_DOMAIN": "news.example.org",
            "SENDDOCK_MAILGUN_API_URL": providers.url,
        }
        server: Server = start_server(db_url, catcher.url, env=env, args=("--concurrency", "1"))
        problems: list[str] = []
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=chromium_path)
                page = browser.new_page(viewport={"width": 1200, "height": 1000})
                page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
                page.on("dialog", lambda dialog: dialog.accept())
                page.set_default_timeout(20_000)
                sign_in(page, server, f"/campaigns/{cid}")
                held = page.locator("[data-unconfirmed-jobs] tr")
                assert held.count() == 3
                assert "not asked yet" in (held.first.text_content() or "")

                page.get_by_role("button", name="Ask the relay").click()
                page.get_by_text(
                    "Asked the relay: 1 confirmed sent, 0 queued again, 2 left"
                ).wait_for()
                assert held.count() == 2
                for row in held.all():
                    assert "mailgun: not seen" in (row.text_content() or "")
                forged = page.request.post(
                    f"{server.url}/campaigns/{cid}/resend-unseen", form={"seen": "2"}
                )
                assert forged.status == 403
                assert status(conn, cid).counts.unconfirmed == 2

                page.get_by_role("button", name="Resend the 2 still unconfirmed").click()
                page.get_by_text("2 unconfirmed recipients queued again").wait_for()
                page.wait_for_selector(".heading [data-status=sent]")
                browser.close()
        finally:
            server.stop()
        assert problems == []
        rows = jobs(conn, bid)
        assert rows[MAILGUN]["status"] == "sent" and rows[MAILGUN]["settled_by"] == "mailgun"
        for email in UNSEEN:
            assert rows[email]["status"] == "sent" and rows[email]["settled_by"] == "person"
        got = catcher.count_by_rcpt()
        # The person chose to resend the two no source saw (the catcher had kept them, so
        # each has a second copy, same Message-ID); the one Mailgun saw was not sent again.
        assert got == {MAILGUN: 1, UNSEEN[0]: 2, UNSEEN[1]: 2, "fine@example.com": 1}
