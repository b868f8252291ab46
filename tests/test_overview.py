"""Issue 39 item 3: the home page opens with an overview: the audience's last 30 days as a
chart (joined, left, bounced or complained, a day each) and what needs a person now (sending,
waiting for a decision, live workers, deaths), every figure exact, read from a real Postgres
through a real `senddock serve`."""

from __future__ import annotations

import re
from pathlib import Path

from senddock.campaigns import broadcast, create_campaign
from senddock.campaigns.broadcast import enqueue_all
from support import Conn, seed_list
from test_browser import chromium, chromium_path, sign_in  # noqa: F401
from test_browser_day_one import server  # noqa: F401
from test_web_headers import signed_in
from web_support import Server

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_the_home_page_says_who_joined_left_and_bounced_and_what_needs_a_person(
    chromium_path: str,  # noqa: F811
    server: Server,  # noqa: F811
    conn: Conn,
) -> None:
    emails = [f"p{i}@example.org" for i in range(6)] + ["zoë@bücher.example"]
    seed_list(conn, "news", emails)
    # Two joined 10 days ago, one 40 days ago (outside the window), the rest today.
    conn.execute(
        "UPDATE subscribers SET created_at = now() - interval '10 days'"
        " WHERE email IN ('p0@example.org', 'p1@example.org')"
    )
    conn.execute(
        "UPDATE subscribers SET created_at = now() - interval '40 days'"
        " WHERE email = 'p2@example.org'"
    )
    conn.execute(
        "INSERT INTO suppressions (email, reason, created_at) VALUES"
        " ('p3@example.org', 'bounce', now()), ('p4@example.org', 'complaint', now()),"
        " ('p5@example.org', 'unsubscribe', now() - interval '3 days'),"
        " ('old@example.org', 'bounce', now() - interval '45 days')"
    )
    sid = conn.execute("SELECT id FROM subscribers WHERE email = 'p0@example.org'").fetchone()
    lid = conn.execute("SELECT id FROM lists WHERE name = 'news'").fetchone()
    assert sid and lid
    conn.execute(
        "INSERT INTO subscription_events (subscriber_id, list_id, action, source)"
        " VALUES (%s, %s, 'leave', 'preferences')",
        (sid["id"], lid["id"]),
    )
    cid = create_campaign(
        conn,
        name="Now",
        list_name="news",
        subject="s",
        from_addr="news@example.org",
        text_body="Hi",
    )
    bid, _, _ = broadcast(conn, cid)
    enqueue_all(conn, bid)  # sending, and no worker runs

    with signed_in(server.url) as c:
        page = c.get("/").text
        archived = c.get("/?archived=1").text
    shown = dict(re.findall(r'data-overview="(\w+)">([^<]+)<', page))
    assert shown == {"subscribers": "7", "sending": "1", "unconfirmed": "0", "workers": "0"}
    title = re.search(r'<title id="audience-title">([^<]+)</title>', page)
    assert title, page
    # 6 joined in the window (p2 is 40 days old); p0's leave and p5's unsubscribe; p3 and p4.
    assert title.group(1).endswith(": 6 joined, 2 left, 2 bounced or complained")
    assert len(re.findall(r'<rect class="bar joined"', page)) == 2  # today, 10 days ago
    assert re.search(r'<div class="alert"><dt><a href="/workers">', page)  # none live
    assert "data-overview" not in archived  # the overview is the home page's

    # In Chromium the chart is drawn inside the page's policy, and its bars have a size.
    problems: list[str] = []
    with chromium(chromium_path, problems, {"width": 1200, "height": 900}) as tab:
        sign_in(tab, server, "/")
        bar = tab.locator("rect.bar.joined").first
        assert float(bar.get_attribute("height") or 0) > 0 and bar.bounding_box()
        tab.screenshot(path=str(DOCS / "overview.png"))
    assert problems == []
