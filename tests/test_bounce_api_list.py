"""GET /api/v1/campaigns carries the later counts as the detail does (issue 21): one Counts."""

from __future__ import annotations

from senddock.testing import Catcher
from support import Conn, jobs
from test_bounce_effects import back, report, sent
from web_support import ServerFactory, make_token
from web_support import serve as serve  # the `senddock serve` fixture


def test_the_campaign_list_shows_the_bounces_and_complaints_after_the_250_as_the_detail(
    conn: Conn, catcher: Catcher, db_url: str, serve: ServerFactory
) -> None:
    emails = ["zoë@bücher.example", "quinn@example.com", "rae@example.com", "sam@example.com"]
    bid = sent(conn, catcher, db_url, emails)
    by = jobs(conn, bid)
    back(
        conn,
        report(
            "postfix-unknown-user", "zoë@bücher.example", by["zoë@bücher.example"]["message_id"]
        ),
    )
    back(conn, report("arf-abuse", "quinn@example.com", by["quinn@example.com"]["message_id"]))
    back(conn, report("spamhaus-block", "rae@example.com", by["rae@example.com"]["message_id"]))
    server = serve(workers=False)
    keys = ("bounced_later", "soft_later", "policy_later", "complaints", "complaint_rate")
    with server.client(make_token(db_url)) as c:
        [item] = c.get("/api/v1/campaigns").json()["items"]
        detail = c.get(f"/api/v1/campaigns/{item['id']}").json()
    assert {k: item[k] for k in keys} == {
        "bounced_later": 1,
        "soft_later": 0,
        "policy_later": 1,
        "complaints": 1,
        "complaint_rate": 0.25,
    }
    assert {k: item[k] for k in keys} == {k: detail[k] for k in keys}
