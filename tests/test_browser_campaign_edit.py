"""Changing a campaign in a real headless Chromium (issue 22): create with Reply-To and a send
time, edit the draft, send a test, send it, be refused an edit of what went out, clone it and
edit the clone, archive the sent one, delete the clone. What the SMTP server receives is the
edited message. Skips without /usr/bin/chromium (tests/test_browser.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from email import message_from_bytes, policy

import pytest
from playwright.sync_api import Page, expect

from senddock.testing import Catcher
from senddock.web import auth
from support import Conn, seed_list, wait_until
from test_browser import CHROMIUM, chromium, chromium_path, sign_in  # noqa: F401  (a fixture)
from web_support import Server, start_server

EMAIL, PASSWORD = "admin@example.org", "correct horse battery staple"
ZOE = "zoë@bücher.example"


@pytest.fixture
def server(db_url: str, conn: Conn, catcher: Catcher) -> Iterator[Server]:
    auth.create_admin(conn, EMAIL, PASSWORD)
    seed_list(conn, "news", [ZOE, "ada@example.org"])
    seed_list(conn, "vip", ["björk@insel.example"])
    srv = start_server(db_url, catcher.url, args=("--concurrency", "2"))
    yield srv
    srv.stop()
    print(srv.text())


def subjects(catcher: Catcher) -> dict[str, str]:
    """Subject by recipient, of what the SMTP server received."""
    return {
        r.rcpt: str(message_from_bytes(r.data, policy=policy.default)["Subject"])
        for r in catcher.received()
    }


def campaign_id(page: Page) -> int:
    found = re.search(r"/campaigns/(\d+)", page.url)
    assert found, page.url
    return int(found.group(1))


def test_a_draft_is_edited_tested_sent_cloned_archived_and_deleted_in_the_browser(
    chromium_path: str,  # noqa: F811
    server: Server,
    catcher: Catcher,
    conn: Conn,
) -> None:
    """Fails without campaign_edit.py (no Edit page, no Reply-To or Send at field)."""
    assert CHROMIUM.exists()
    problems: list[str] = []
    with chromium(chromium_path, problems) as page:
        sign_in(page, server, "/campaigns/new")

        # New, with Reply-To and a time a year ahead: scheduled, not sent.
        page.goto(server.url + "/campaigns/new")
        page.fill("input[name=name]", "Jüne news")
        page.check("input[name=lists][value=news]")
        page.fill("input[name=from_addr]", "Nëws <news@example.org>")
        page.fill("input[name=reply_to]", "redaktion@example.org")
        page.fill("input[name=subject]", "Old {{ subscriber.name }}")
        # A body that starts with a newline, which an HTML textarea drops unless told twice.
        page.fill("textarea[name=text_body]", "\nHallo {{ subscriber.name }}.")
        page.fill("input[name=send_at]", "2099-06-01T09:00")
        page.get_by_role("button", name="Save draft").click()
        expect(page.locator("p.sub").first).to_contain_text("scheduled for 2099-06-01 09:00")
        expect(page.locator("p.sub").first).to_contain_text("replies to redaktion@example.org")
        cid = campaign_id(page)

        # Edit: new subject, a second list, no schedule (in one save).
        page.get_by_role("link", name="Edit").click()
        expect(page.locator("input[name=send_at]")).to_have_value("2099-06-01T09:00")
        page.fill("input[name=subject]", "Neu {{ subscriber.name }}")
        page.check("input[name=lists][value=vip]")
        page.fill("input[name=send_at]", "")
        page.get_by_role("button", name="Save draft").click()
        expect(page.locator(".flash").first).to_contain_text("changed subject, lists, schedule")
        expect(page.locator("p.sub").first).to_contain_text("“Neu {{ subscriber.name }}”")
        expect(page.locator("p.sub").first).not_to_contain_text("scheduled")

        # A misspelt name is refused on the form, in one line, and nothing changes.
        page.get_by_role("link", name="Edit").click()
        page.fill("input[name=subject]", "Neu {{ subscriber.nmae }}")
        page.get_by_role("button", name="Save draft").click()
        expect(page.locator(".flash.error")).to_contain_text("subscriber.nmae is undefined")

        # A test of the saved draft to one address, through the trial send.
        page.goto(server.url + f"/campaigns/{cid}/edit")
        page.fill("input[name=to]", "qa@example.org")
        page.get_by_role("button", name="Send a test").click()
        expect(page.locator(".flash").first).to_contain_text("Test sent to qa@example.org")
        # qa is no subscriber: rendered as the first of the audience (issue 35), not blank.
        assert subjects(catcher) == {"qa@example.org": "Neu Name 1"}

        # Send it: every member of both lists gets the edited message.
        catcher.clear()
        page.goto(server.url + f"/campaigns/{cid}")
        page.get_by_role("button", name="Send").click()
        page.wait_for_selector(".badge[data-status=sent]")
        assert wait_until(lambda: len(catcher.received()) == 3)
        assert subjects(catcher) == {
            "zoë@xn--bcher-kva.example": "Neu Name 1",
            "ada@example.org": "Neu Name 2",
            "björk@insel.example": "Neu Name 1",
        }

        # What went out stays as it went: the edit is refused with the reason.
        page.get_by_role("link", name="Edit").click()
        page.fill("input[name=subject]", "Too late")
        page.get_by_role("button", name="Save draft").click()
        expect(page.locator(".flash.error")).to_contain_text("it is sent")
        expect(page.locator(".flash.error")).to_contain_text("clone it")
        # Its name (nobody receives it) still changes: the rest of the form comes back as
        # stored, so it changes nothing else, CRLF line ends (a body given to the CLI) too.
        conn.execute(
            "UPDATE campaigns SET text_body = text_body || E'\\r\\nBye\\r\\n' WHERE id = %s",
            (cid,),
        )
        page.goto(server.url + f"/campaigns/{cid}/edit")
        page.fill("input[name=name]", "Jüne news (sent)")
        page.get_by_role("button", name="Save draft").click()
        expect(page.locator(".flash").first).to_contain_text("Saved: changed name.")

        # Clone the sent campaign: a new draft, edited, then seen on its page.
        page.goto(server.url + f"/campaigns/{cid}")
        page.get_by_role("button", name="Clone").click()
        expect(page.locator("input[name=name]")).to_have_value("Jüne news (sent) (copy)")
        clone = campaign_id(page)
        assert clone != cid
        page.fill("input[name=subject]", "Noch einmal {{ subscriber.name }}")
        # The audience and the body's form change on an edit too (issue 22).
        page.fill("input[name=filter]", 'attributes.city = "Zürich"')
        page.fill("textarea[name=markdown_body]", "# Noch *einmal*")
        page.get_by_role("button", name="Save draft").click()
        expect(page.locator(".flash").first).to_contain_text(
            "changed subject, Markdown body, filter"
        )
        expect(page.locator("h1")).to_contain_text("Jüne news (sent) (copy)")
        expect(page.locator("p.sub").first).to_contain_text("Noch einmal")
        expect(page.locator(".badge[data-status=draft]").first).to_be_visible()
        edited = conn.execute(
            "SELECT markdown_body, audience_filter FROM campaigns WHERE id = %s", (clone,)
        ).fetchone()

        # Archive the sent one: out of the list, under Archived.
        page.goto(server.url + f"/campaigns/{cid}")
        page.get_by_role("button", name="Archive").click()
        expect(page.locator(".flash").first).to_contain_text("Archived")
        page.goto(server.url + "/")
        expect(page.locator(f"tr[data-campaign='{cid}']")).to_have_count(0)
        expect(page.locator(f"tr[data-campaign='{clone}']")).to_have_count(1)
        page.get_by_role("link", name="Archived").click()
        expect(page.locator(f"tr[data-campaign='{cid}']")).to_have_count(1)

        # Delete the clone (a draft).
        page.goto(server.url + f"/campaigns/{clone}")
        page.get_by_role("button", name="Delete").click()
        expect(page.locator(".flash").first).to_contain_text(f"Draft {clone} deleted")
        expect(page.locator(f"tr[data-campaign='{clone}']")).to_have_count(0)
    assert edited == {
        "markdown_body": "# Noch *einmal*",
        "audience_filter": 'attributes.city = "Zürich"',
    }
    row = conn.execute("SELECT count(*) AS n FROM campaigns WHERE id = %s", (clone,)).fetchone()
    assert row is not None and row["n"] == 0
    assert problems == []
