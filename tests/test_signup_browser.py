"""The sign-up form in a real Chromium: the dashboard's list page shows a public list's form,
and that HTML, pasted into another page, signs a person up when they submit it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from senddock.audience import signup
from senddock.audience.lists import configure
from senddock.testing import Catcher
from senddock.web import auth
from support import Conn
from test_browser import chromium, chromium_path, sign_in  # noqa: F401  (a fixture)
from web_support import Server, start_server

EMAIL, PASSWORD = "admin@example.org", "correct horse battery staple"
DEFAULT_PUBLIC_URL = "http://127.0.0.1:8025"


@pytest.fixture
def server(db_url: str, conn: Conn, catcher: Catcher) -> Iterator[Server]:
    auth.create_admin(conn, EMAIL, PASSWORD)
    with start_server(db_url, catcher.url, workers=False) as srv:
        yield srv
        print(srv.text())


def test_the_list_page_shows_a_form_that_signs_up_from_another_page(
    chromium_path: str,  # noqa: F811
    server: Server,
    conn: Conn,
    catcher: Catcher,
) -> None:
    news = configure(conn, "news", double_opt_in=True, from_addr="News <news@example.org>")
    signup.set_public(conn, news, True)
    configure(conn, "staff")  # private: no form shown
    problems: list[str] = []
    with chromium(chromium_path, problems) as page:
        sign_in(page, server, "/lists")
        page.get_by_role("heading", name="Sign-up form of news").wait_for()
        assert page.get_by_role("heading", name="Sign-up form of staff").count() == 0
        form = page.get_by_label("Sign-up form HTML of news").input_value()
        assert 'name="website"' in form

        # Pasted into someone else's page (the default public URL points at this server).
        assert page.context.browser is not None
        other = page.context.browser.new_page()  # a page of its own, not signed in
        other.set_content(
            "<!doctype html><title>My blog</title>" + form.replace(DEFAULT_PUBLIC_URL, server.url)
        )
        other.get_by_label("Email").fill("zoë@bücher.example")
        other.get_by_label("Name").fill("Zoë")
        other.get_by_role("button", name="Subscribe to news").click()
        other.get_by_role("heading", name="Thank you").wait_for()

    assert catcher.wait_for(1)  # the sign-up is applied, then its request mailed
    row = conn.execute(
        "SELECT s.name, m.status FROM list_memberships m"
        " JOIN subscribers s ON s.id = m.subscriber_id WHERE s.email = %s",
        ("zoë@bücher.example",),
    ).fetchone()
    assert row == {"name": "Zoë", "status": "unconfirmed"}
