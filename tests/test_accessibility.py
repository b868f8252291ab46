"""Issue 39 item 8: axe-core (4.12, shipped in axe-playwright-python) finds no serious or
critical violation on any dashboard page or public page, in headless Chromium against a real
`senddock serve` with real data: odd names, a campaign, a starter layout, a login form, the
unsubscribe and preference pages of a signed link, at desktop and at phone width."""

from __future__ import annotations

from typing import Any

from axe_playwright_python.sync_playwright import Axe  # type: ignore[import-untyped]
from playwright.sync_api import Page

from senddock.campaigns import create_campaign, starters
from senddock.campaigns.compose import link_key
from senddock.config import Settings
from senddock.messages import PREFERENCES, UNSUBSCRIBE, sign
from support import Conn, seed_list
from test_browser import chromium, chromium_path, sign_in  # noqa: F401
from test_browser_day_one import server  # noqa: F401
from web_support import Server

SERIOUS = ("serious", "critical")


def _violations(axe: Axe, page: Page) -> list[str]:
    """Serious and critical violations, each as `rule: first element (n more)`."""
    page.wait_for_load_state("networkidle")
    found: list[dict[str, Any]] = axe.run(page).response["violations"]
    return [
        f"{v['id']}: {v['nodes'][0]['target']} ({len(v['nodes'])} in all)"
        for v in found
        if v["impact"] in SERIOUS
    ]


def test_no_page_has_a_serious_accessibility_violation(
    chromium_path: str,  # noqa: F811
    server: Server,  # noqa: F811
    conn: Conn,
    db_url: str,
) -> None:
    seed_list(conn, "news", ["ada@example.org", "zoë@bücher.example"])
    conn.execute("UPDATE subscribers SET name = 'Zoë <b>Ü</b>' WHERE email LIKE 'zo%'")
    cid = create_campaign(
        conn,
        name="Juli",
        list_name="news",
        subject="Hallo {{ subscriber.name }}",
        from_addr="news@example.org",
        text_body=None,
        markdown_body="# Hallo\n\nA [link](https://example.org/).\n",
        track="opens,clicks",  # its page shows the opens and clicks block too
    )
    layout = starters.add(conn, "announcement")
    sid = conn.execute("SELECT id FROM subscribers WHERE email LIKE 'zo%'").fetchone()
    assert sid is not None
    key = link_key(conn, Settings(database_url=db_url))
    public = [
        "/login",
        f"/unsubscribe/{sign(key, UNSUBSCRIBE, sid['id'], cid)}",
        f"/preferences/{sign(key, PREFERENCES, sid['id'], cid)}",
    ]
    private = [
        "/",
        "/unconfirmed",
        "/subscribers?cols=city",
        f"/subscribers/{sid['id']}",
        "/subscribers/new",
        "/lists",
        "/suppressions",
        "/layouts",
        f"/layouts/{layout}",
        "/campaigns/new",
        f"/campaigns/{cid}",
        f"/campaigns/{cid}/edit",
        "/workers",
        "/settings",
    ]
    axe = Axe()
    found: dict[str, list[str]] = {}
    problems: list[str] = []
    for width in (1200, 390):
        with chromium(chromium_path, problems, {"width": width, "height": 900}) as page:
            for path in public:
                page.goto(server.url + path)
                found[f"{path} @{width}"] = _violations(axe, page)
            sign_in(page, server, "/")
            for path in private:
                page.goto(server.url + path)
                found[f"{path} @{width}"] = _violations(axe, page)
    assert problems == []
    assert {p: v for p, v in found.items() if v} == {}
    assert len(found) == 2 * (len(public) + len(private))
