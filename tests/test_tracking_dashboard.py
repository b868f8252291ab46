"""Issue 37 item 4, on the dashboard: a tracked campaign's page shows its opens and clicks
(people, events, machine events) and each link with its clicks, people and machine clicks,
the same figures as `campaign status --json`, after real clicks through a real `serve` on a
message the catcher received; an untracked campaign's page has no such block."""

from __future__ import annotations

import html
import re

import httpx

from senddock.testing import Catcher
from senddock.web import auth
from support import Conn, wait_until
from test_browser import EMAIL, PASSWORD
from test_tracking import events, hrefs, parts, path_of, seed, send, status, tracked_campaign
from test_web_headers import signed_in
from web_support import ServerFactory, servers  # noqa: F401

ZOE_WIRE = "zoë@xn--bcher-kva.example"


def test_the_campaign_page_shows_opens_clicks_and_each_link(
    db_url: str, conn: Conn, catcher: Catcher
) -> None:
    seed(conn)
    auth.create_admin(conn, EMAIL, PASSWORD)
    for started in servers(db_url):
        server = started(workers=False)
        cid = tracked_campaign(conn)
        plain = tracked_campaign(conn, track="", name="untracked")
        send(conn, db_url, catcher, server, cid)
        _, page_html = parts(catcher, ZOE_WIRE)
        tracked = [h for h in (html.unescape(h) for h in hrefs(page_html)) if "/r/" in h]
        assert tracked, page_html
        with httpx.Client(base_url=server.url) as reader:
            for url in (tracked[0], tracked[0], tracked[-1]):  # one person, two links
                assert reader.get(path_of(server, url)).status_code == 302
            assert reader.head(path_of(server, tracked[0])).status_code == 302  # a machine's
        assert wait_until(lambda: events(conn) >= 4, 10)  # written in batches
        js = status(db_url, cid)
        assert js["clicked"] == 1 and js["clicks"] == 3
        with signed_in(server.url) as c:
            page = c.get(f"/campaigns/{cid}").text
            other = c.get(f"/campaigns/{plain}").text
        assert "Opens and clicks" in page and "Opens and clicks" not in other
        fields = dict(re.findall(r'data-field="(\w+)">([^<]*)<', page))
        for key in ("clicked", "clicks", "opens", "clicks_machine_events"):
            assert fields[key] == str(js[key]), key
        table = page.split("data-links", 1)[1].split("</table>", 1)[0]
        shown = re.findall(
            r'title="([^"]+)">[^<]*</span></td>\s*<td class="num">(\d+)</td>'
            r'\s*<td class="num">([^<]+)</td>\s*<td class="num">(\d+)</td>',
            table,
        )
        want = [
            (html.escape(k["url"]), str(k["clicks"]), str(k["unique"]), str(k["machine"]))
            for k in js["links"]
        ]
        assert shown == want and len(shown) == len(js["links"])
