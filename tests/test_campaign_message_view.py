"""Issue 39 item 4: the campaign page shows the message itself, rendered and as raw source;
the campaign list says when each campaign was created, is scheduled, began or was sent.

Against a real `senddock serve` and Postgres: the page frames the rendered message; the frame's
document is the HTML part as the audience's first subscriber would get it (their name, escaped,
and none of their links) under the preview's sandbox policy; the source is the whole message
as plain text; nobody signed out sees either.
"""

from __future__ import annotations

import email
import email.policy
import re
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage

import httpx

from crash_support import campaign_done
from senddock.campaigns import broadcast, create_campaign
from senddock.campaigns.broadcast import enqueue_all
from senddock.testing import Catcher
from support import Conn, ThreadWorker, seed_list, wait_until
from test_browser_day_one import server  # noqa: F401
from test_web_headers import signed_in
from web_support import Server, make_token


def test_the_campaign_page_shows_the_message_and_its_source(
    server: Server,  # noqa: F811
    conn: Conn,
) -> None:
    seed_list(conn, "news", ["zoë@bücher.example", "ada@example.org"])
    conn.execute("UPDATE subscribers SET name = 'Zoë <b>Ü</b>' WHERE email LIKE 'zo%'")
    cid = create_campaign(
        conn,
        name="Juli",
        list_name="news",
        subject="Grüße, {{ subscriber.name }}",
        from_addr="Bücher <news@example.org>",
        text_body=None,
        markdown_body="# Hallo {{ subscriber.name }}\n\n[Unsubscribe]({{ unsubscribe_url }})\n",
    )
    with httpx.Client(base_url=server.url) as anon:
        for path in (f"/campaigns/{cid}/message", f"/campaigns/{cid}/message.eml"):
            assert anon.get(path, follow_redirects=False).status_code in (302, 303), path
    with signed_in(server.url) as c:
        page = c.get(f"/campaigns/{cid}").text
        assert f'src="/campaigns/{cid}/message"' in page
        assert f'href="/campaigns/{cid}/message.eml"' in page
        shown = c.get(f"/campaigns/{cid}/message")
        source = c.get(f"/campaigns/{cid}/message.eml")
        assert c.get("/campaigns/999999/message").status_code == 404
    assert shown.status_code == 200
    assert shown.headers["content-security-policy"].startswith("sandbox")
    # The first subscriber of the audience (by id: Zoë), the name as text, not markup.
    assert "<h1>Hallo Zoë &lt;b&gt;Ü&lt;/b&gt;</h1>" in shown.text
    assert "/unsubscribe/" not in shown.text  # nobody's link is signed for a view
    assert source.status_code == 200
    assert source.headers["content-type"] == "text/plain; charset=utf-8"
    assert source.headers["x-content-type-options"] == "nosniff"
    msg = email.message_from_bytes(source.content, policy=email.policy.default)
    assert isinstance(msg, EmailMessage)
    assert msg["Subject"] == "Grüße, Zoë <b>Ü</b>"
    assert msg["To"].addresses[0].addr_spec == "recipient@example.com"  # an example address
    assert msg.get_body(("html",)) is not None and msg.get_body(("plain",)) is not None


def test_the_campaign_list_says_when_each_was_created_started_or_sent(
    server: Server,  # noqa: F811
    conn: Conn,
    db_url: str,
    catcher: Catcher,
) -> None:
    """Issue 39: "Campaigns: no dates, subjects as raw {{ }}". A draft says when it was
    created, a scheduled one when it goes, a sent one when it was sent (the API lists the same
    moments); a subject shows its fields as marks."""
    seed_list(conn, "news", ["ada@example.org"])

    def made(name: str, send_at: datetime | None = None) -> int:
        return create_campaign(
            conn,
            name=name,
            list_name="news",
            subject=name + " for {{ subscriber.name }} in {{ subscriber.attributes.city }}",
            from_addr="news@example.org",
            text_body="Hi",
            send_at=send_at,
        )

    draft = made("Draft")
    made("Later", datetime.now(UTC) + timedelta(days=3))
    sent = made("Sent")
    bid, _, _ = broadcast(conn, sent)
    enqueue_all(conn, bid)
    with ThreadWorker(db_url, catcher.url):
        assert wait_until(lambda: campaign_done(conn, sent), 30)
    with signed_in(server.url) as c:
        page = c.get("/").text
    when = dict(re.findall(r'data-campaign="(\d+)">.*?<td class="when">([^<]+)</td>', page, re.S))
    assert when[str(draft)].startswith("created ")
    assert when[str(sent)].startswith("sent ")
    assert any(v.startswith("scheduled for ") for v in when.values())
    # Subjects read as what they say, their fields marked (the template is in the title).
    assert ">Draft for ‹name› in ‹city›</div>" in page
    assert 'title="Draft for {{ subscriber.name }} in {{ subscriber.attributes.city }}"' in page
    token = make_token(db_url)
    listed = httpx.get(
        server.url + "/api/v1/campaigns", headers={"Authorization": f"Bearer {token}"}
    ).json()["items"]
    by_name = {i["name"]: i for i in listed}
    assert by_name["Sent"]["started_at"] and by_name["Sent"]["finished_at"]
    assert by_name["Draft"]["started_at"] is None and by_name["Draft"]["finished_at"] is None
