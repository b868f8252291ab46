"""Failed webhook signatures are limited per client address in Postgres (issue 21): the limit
holds across `senddock serve` processes of one database, and a good signature after it is
refused too, until the window is over."""

from __future__ import annotations

from senddock.web.webhook_limits import FAILURES
from support import Conn, jobs, send_campaign
from test_bounce_providers import MAILGUN_KEY
from test_bounce_webhooks import POSTMARK, count, mailgun, mailgun_failed
from web_support import ServerFactory
from web_support import serve as serve  # the `senddock serve` fixture

ENV = {
    "SENDDOCK_MAILGUN_SIGNING_KEY": MAILGUN_KEY,
    "SENDDOCK_POSTMARK_WEBHOOK_USER": POSTMARK[0],
    "SENDDOCK_POSTMARK_WEBHOOK_PASSWORD": POSTMARK[1],
}


def test_failed_signatures_from_one_address_are_limited_across_serve_processes(
    conn: Conn, serve: ServerFactory
) -> None:
    _, bid = send_campaign(conn, "news", ["zoë@bücher.example"])
    ours = str(jobs(conn, bid)["zoë@bücher.example"]["message_id"])
    good = mailgun(mailgun_failed("zoë@bücher.example", ours))
    forged = mailgun(mailgun_failed("zoë@bücher.example", ours), key="a guess")
    one, two = serve(workers=False, env=ENV), serve(workers=False, env=ENV)
    with one.client() as a, two.client() as b:
        # Half the tries on each process: they count together.
        answers = [(a, b)[i % 2].post("/webhooks/mailgun", content=forged) for i in range(FAILURES)]
        assert [r.status_code for r in answers] == [403] * FAILURES
        for client in (a, b):
            refused = client.post("/webhooks/mailgun", content=good)
            assert refused.status_code == 429, refused.text
            assert "too many failed signatures" in refused.json()["error"]["message"]
            wrong = client.post("/webhooks/postmark", content=b"{}", auth=("x", "y"))
            assert wrong.status_code == 429
    assert count(conn, "bounce_messages") == 0 and count(conn, "suppressions") == 0
    # Another address is not held back, and a good signature is never counted.
    conn.execute("UPDATE login_attempts SET key = 'webhook:192.0.2.1'")
    with one.client() as a:
        for _ in range(FAILURES + 1):
            assert a.post("/webhooks/mailgun", content=good).status_code == 200
    assert count(conn, "bounce_findings") == 1
