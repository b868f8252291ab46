"""What a bounce or complaint that comes back after the 250 does (issue 21, queue/bounces.py).

Each test sends a real broadcast through a real worker to a real SMTP server, then records a
returned message about one of its jobs with `store.receive`, and reads the rows: the
suppression, the job's record, the counters, and the next broadcast's jobs.
"""

from __future__ import annotations

import re
from pathlib import Path

from senddock.bounces.store import Received, receive
from senddock.bounces.verp import ReturnPath
from senddock.campaigns import broadcast
from senddock.campaigns.broadcast import enqueue_all
from senddock.queue.bounces import SoftLimit
from senddock.queue.counts import count
from senddock.testing import Catcher
from support import Conn, ThreadWorker, jobs, new_campaign, send_campaign, unfinished, wait_until

HERE = Path(__file__).parent / "bounces"
KEY = b"effects-test-key" * 2
PATH = ReturnPath.parse("bounces.example.org")
# The address and Message-ID each sample names (tests/bounces/README.md), replaced by ours.
NAMED = {
    "postfix-unknown-user": "ada@example.com",
    "exchange-not-found": "carol@contoso.example",
    "mailbox-full": "erin@example.net",
    "spamhaus-block": "gus@example.com",
    "arf-abuse": "quinn@example.com",
}
SAMPLE_ID = re.compile(rb"<b42\.s\d+\.ab[a-z]@senddock\.example\.org>")


def report(sample: str, email: str, message_id: str, extra: bytes = b"") -> bytes:
    """A sample returned message about our job: its address and our Message-ID in it."""
    raw = (HERE / f"{sample}.eml").read_bytes().replace(NAMED[sample].encode(), email.encode())
    raw = SAMPLE_ID.sub(message_id.encode(), raw)
    return extra + raw.replace(b"\n", b"\r\n")


def sent(conn: Conn, catcher: Catcher, db_url: str, emails: list[str]) -> int:
    """A broadcast to `emails`, every job of it sent by a real worker: its id."""
    _, bid = send_campaign(conn, "news", emails)
    with ThreadWorker(db_url, catcher.url):
        assert wait_until(lambda: unfinished(conn, bid) == 0)
    assert {j["status"] for j in jobs(conn, bid).values()} == {"sent"}
    return bid


def back(conn: Conn, raw: bytes, to: str = "b@bounces.example.org") -> Received:
    return receive(conn, "pipe", raw, to, PATH, KEY, SoftLimit(3, 30))


def suppressions(conn: Conn) -> dict[str, dict[str, object]]:
    rows = conn.execute("SELECT * FROM suppressions").fetchall()
    return {str(r["email"]).lower(): r for r in rows}


def test_a_hard_bounce_suppresses_marks_the_job_and_counts_once(
    conn: Conn, catcher: Catcher, db_url: str
) -> None:
    bid = sent(conn, catcher, db_url, ["ada@example.com", "bob@example.com"])
    job = jobs(conn, bid)["ada@example.com"]
    got = back(conn, report("postfix-unknown-user", "ada@example.com", job["message_id"]))
    assert (got.new, got.findings, got.matched) == (True, 1, 1)
    [row] = suppressions(conn).values()
    assert (row["email"], row["reason"], row["source_broadcast_id"]) == (
        "ada@example.com",
        "bounce",  # the reason the at-send-time bounce (suppress_bounces) writes
        bid,
    )
    assert str(row["detail"]).startswith("5.1.1 ")
    marked = jobs(conn, bid)["ada@example.com"]
    assert marked["bounced_at"] is not None and marked["bounce_kind"] == "hard"
    assert jobs(conn, bid)["bob@example.com"]["bounced_at"] is None
    subscriber = conn.execute(
        "SELECT status FROM subscribers WHERE id = %s", (job["subscriber_id"],)
    ).fetchone()
    assert subscriber == {"status": "bounced"}
    assert count(conn, bid).bounced_later == 1
    before = (suppressions(conn), jobs(conn, bid), count(conn, bid))

    # The same bytes again: already recorded, nothing changes.
    again = back(conn, report("postfix-unknown-user", "ada@example.com", job["message_id"]))
    assert again.new is False
    assert (suppressions(conn), jobs(conn, bid), count(conn, bid)) == before

    # Another, different hard DSN about the same job: a new finding, the same count.
    other = back(conn, report("exchange-not-found", "ada@example.com", job["message_id"]))
    assert (other.new, other.matched) == (True, 1)
    assert count(conn, bid).bounced_later == 1
    assert suppressions(conn) == before[0]  # the first reason and detail stay
    assert jobs(conn, bid)["ada@example.com"]["bounced_at"] == marked["bounced_at"]


def test_a_complaint_suppresses_with_its_reason_and_counts(
    conn: Conn, catcher: Catcher, db_url: str
) -> None:
    bid = sent(conn, catcher, db_url, ["quinn@example.com", "rae@example.com"])
    job = jobs(conn, bid)["quinn@example.com"]
    got = back(
        conn, report("arf-abuse", "quinn@example.com", job["message_id"]), "b@bounces.example.org"
    )
    assert got.matched == 1
    assert suppressions(conn)["quinn@example.com"]["reason"] == "complaint"
    counts = count(conn, bid)
    assert (counts.complaints, counts.sent, counts.bounced_later) == (1, 2, 0)
    assert counts.complaint_rate == 0.5
    assert jobs(conn, bid)["quinn@example.com"]["bounce_kind"] == "complaint"


def test_a_policy_refusal_suppresses_nobody_but_counts(
    conn: Conn, catcher: Catcher, db_url: str
) -> None:
    bid = sent(conn, catcher, db_url, ["gus@example.com"])
    job = jobs(conn, bid)["gus@example.com"]
    assert back(conn, report("spamhaus-block", "gus@example.com", job["message_id"])).matched == 1
    assert suppressions(conn) == {}
    assert count(conn, bid).policy_later == 1
    assert jobs(conn, bid)["gus@example.com"]["bounce_kind"] == "policy"


def test_three_soft_bounces_from_three_messages_suppress_two_do_not(
    conn: Conn, catcher: Catcher, db_url: str
) -> None:
    bid = sent(conn, catcher, db_url, ["erin@example.net"])
    job = jobs(conn, bid)["erin@example.net"]
    for n in (1, 2):
        raw = report("mailbox-full", "erin@example.net", job["message_id"], b"X-Try: %d\r\n" % n)
        assert back(conn, raw).new
    assert suppressions(conn) == {}
    assert count(conn, bid).soft_later == 1  # one job, counted once
    raw = report("mailbox-full", "erin@example.net", job["message_id"], b"X-Try: 3\r\n")
    assert back(conn, raw).matched == 1
    row = suppressions(conn)["erin@example.net"]
    assert (row["reason"], row["detail"]) == ("bounce", "3 soft bounces in 30 days")
    assert count(conn, bid).soft_later == 1


def test_a_report_about_a_message_we_did_not_send_or_a_forged_return_path_suppresses_nobody(
    conn: Conn, catcher: Catcher, db_url: str
) -> None:
    bid = sent(conn, catcher, db_url, ["ada@example.com"])
    sid = int(jobs(conn, bid)["ada@example.com"]["subscriber_id"])
    made_up = f"<sd.{bid}.{sid}.guessed@news.example.org>"
    unmatched = back(conn, report("postfix-unknown-user", "ada@example.com", made_up))
    assert (unmatched.findings, unmatched.matched) == (1, 0)
    forged = PATH.address(b"not our key" * 3, bid, sid)
    raw = report("postfix-unknown-user", "ada@example.com", made_up, b"X-Try: forged\r\n")
    assert back(conn, raw, forged).matched == 0
    assert suppressions(conn) == {}
    assert count(conn, bid).bounced_later == 0
    assert jobs(conn, bid)["ada@example.com"]["bounced_at"] is None
    effects = conn.execute("SELECT count(*) AS n FROM bounce_effects").fetchone()
    assert effects == {"n": 0}


def test_a_signed_return_path_names_the_job_even_after_retention_deleted_it(
    conn: Conn, catcher: Catcher, db_url: str
) -> None:
    bid = sent(conn, catcher, db_url, ["ada@example.com"])
    job = jobs(conn, bid)["ada@example.com"]
    conn.execute("DELETE FROM broadcast_jobs WHERE broadcast_id = %s", (bid,))  # as retention
    to = PATH.address(KEY, bid, int(job["subscriber_id"]))
    assert back(
        conn, report("postfix-unknown-user", "ada@example.com", "<x@y.example>"), to
    ).matched
    assert suppressions(conn)["ada@example.com"]["reason"] == "bounce"
    assert count(conn, bid).bounced_later == 1


def test_the_next_broadcast_to_the_list_skips_an_address_that_bounced_later(
    conn: Conn, catcher: Catcher, db_url: str
) -> None:
    bid = sent(conn, catcher, db_url, ["ada@example.com", "bob@example.com"])
    job = jobs(conn, bid)["ada@example.com"]
    back(conn, report("postfix-unknown-user", "ada@example.com", job["message_id"]))
    cid = new_campaign(conn, "news", "next")
    next_bid, _, _ = broadcast(conn, cid)
    enqueue_all(conn, next_bid)
    assert set(jobs(conn, next_bid)) == {"bob@example.com"}
