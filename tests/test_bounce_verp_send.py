"""With SENDDOCK_BOUNCE_DOMAIN set, each message's envelope sender is its job's signed VERP
address and its From header is the campaign's (issue 21, item 2)."""

from __future__ import annotations

import email
import email.policy

from senddock.bounces.verp import ReturnPath
from senddock.campaigns import compose
from senddock.config import Settings
from senddock.testing import Catcher
from support import Conn, ThreadWorker, jobs, send_campaign, wait_until

DOMAIN = "bounces.example.org"


def test_each_message_goes_from_its_jobs_verp_address_and_the_campaigns_from(
    conn: Conn, db_url: str
) -> None:
    emails = [f"r{i}@example.com" for i in range(6)]
    with Catcher() as catcher:
        _, bid = send_campaign(conn, "news", emails)
        with ThreadWorker(db_url, catcher.url, concurrency=1, bounce_domain=DOMAIN):
            assert catcher.wait_for(len(emails), timeout=30)
            assert wait_until(lambda: all(j["status"] == "sent" for j in jobs(conn, bid).values()))
    key = compose.link_key(conn, Settings(database_url=db_url))
    path = ReturnPath.parse(DOMAIN)
    by = jobs(conn, bid)
    got = {r.rcpt.lower(): r for r in catcher.received()}
    assert set(got) == set(emails)
    for address, received in got.items():
        job = by[address]
        assert received.mail_from == path.address(key, bid, int(job["subscriber_id"]))
        assert path.read(key, received.mail_from) == (bid, int(job["subscriber_id"]))
        message = email.message_from_bytes(received.data, policy=email.policy.default)
        assert message["From"] == "News <news@example.org>"


def test_without_a_bounce_domain_the_envelope_sender_is_the_from_address(
    conn: Conn, db_url: str
) -> None:
    with Catcher() as catcher:
        send_campaign(conn, "news", ["ann@example.com", "bob@example.com"])
        with ThreadWorker(db_url, catcher.url, concurrency=1):
            assert catcher.wait_for(2, timeout=30)
    assert {r.mail_from for r in catcher.received()} == {"news@example.org"}
