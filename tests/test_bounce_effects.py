"""What a bounce or complaint after the 250 does: suppressions, the job's record, the counts
(issue 21, item 1; queue/bounces.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

from senddock.bounces.store import receive
from senddock.bounces.verp import ReturnPath
from senddock.queue import bounces as effects
from senddock.queue.counts import count
from support import Conn, jobs, send_campaign, senddock, worker_env
from web_support import make_admin, make_token, start_server

EMAIL, PASSWORD = "admin@example.org", "correct horse battery staple"

HERE = Path(__file__).parent / "bounces"
KEY = b"effects-test-key-" * 2
PATH = ReturnPath.parse("bounces.example.org")


def sent(conn: Conn, name: str, emails: list[str]) -> tuple[int, dict[str, dict[str, object]]]:
    """A broadcast whose jobs the relay took (sent): (broadcast id, jobs by address)."""
    _, bid = send_campaign(conn, "news", emails, name=name)
    conn.execute(
        "UPDATE broadcast_jobs SET status = 'sent', sent_at = now() WHERE broadcast_id = %s",
        (bid,),
    )
    return bid, jobs(conn, bid)


def bounce(
    conn: Conn, file: str, bid: int, job: dict[str, object], extra: bytes = b"", **kw: object
) -> None:
    raw = extra + (HERE / f"{file}.eml").read_bytes()
    to = PATH.address(KEY, bid, int(str(job["subscriber_id"])))
    receive(conn, "smtp", raw, to, PATH, KEY, **kw)  # type: ignore[arg-type]


def reason(conn: Conn, email: str) -> tuple[str, str] | None:
    row = conn.execute(
        "SELECT reason, detail FROM suppressions WHERE lower(email) = lower(%s)", (email,)
    ).fetchone()
    return (str(row["reason"]), str(row["detail"])) if row else None


def test_a_hard_bounce_later_suppresses_marks_the_job_and_counts_it_once(conn: Conn) -> None:
    bid, by = sent(conn, "one", ["ada@example.com", "bob@example.com"])
    bounce(conn, "postfix-unknown-user", bid, by["ada@example.com"])
    # The same message again (its digest) and another DSN about the same job: no change.
    bounce(conn, "postfix-unknown-user", bid, by["ada@example.com"])
    bounce(conn, "gmail-no-such-account", bid, by["ada@example.com"], b"X-Again: 1\r\n")
    got = reason(conn, "ada@example.com")
    assert got is not None and got[0] == "bounce" and "5.1.1" in got[1]
    assert reason(conn, "bob@example.com") is None
    job = jobs(conn, bid)["ada@example.com"]
    assert job["status"] == "sent" and job["bounce_kind"] == "hard" and job["bounced_at"]
    c = count(conn, bid)
    assert (c.sent, c.bounced_later, c.soft_later, c.complaints) == (2, 1, 0, 0)
    # The next broadcast skips the address.
    nxt, _ = sent(conn, "two", ["ada@example.com", "bob@example.com"])
    assert set(jobs(conn, nxt)) == {"bob@example.com"}
    row = conn.execute("SELECT status FROM subscribers WHERE email = 'ada@example.com'")
    assert row.fetchone() == {"status": "bounced"}


def test_a_complaint_suppresses_and_counts_against_the_rate(conn: Conn) -> None:
    emails = [f"r{i}@example.com" for i in range(200)]
    bid, by = sent(conn, "one", emails)
    bounce(conn, "arf-abuse", bid, by["r7@example.com"])
    got = reason(conn, "r7@example.com")
    assert got is not None and got[0] == "complaint"
    c = count(conn, bid)
    assert c.complaints == 1 and c.complaint_rate == 1 / 200
    assert jobs(conn, bid)["r7@example.com"]["bounce_kind"] == "complaint"


def test_soft_bounces_suppress_at_the_limit_and_policy_suppresses_nobody(conn: Conn) -> None:
    limit = effects.SoftLimit(limit=3, days=30)
    for n in range(1, 4):
        bid, by = sent(conn, f"c{n}", ["erin@example.net", "gus@example.com"])
        bounce(conn, "mailbox-full", bid, by["erin@example.net"], soft=limit)
        # Twice for the same job: counted once towards the limit.
        bounce(conn, "expired", bid, by["erin@example.net"], b"X-N: 1\r\n", soft=limit)
        bounce(conn, "spamhaus-block", bid, by["gus@example.com"], soft=limit)
        assert count(conn, bid).soft_later == 1 and count(conn, bid).policy_later == 1
        got = reason(conn, "erin@example.net")
        if n < 3:
            assert got is None
        else:
            assert got is not None and got[0] == "bounce" and "soft bounce limit" in got[1]
    assert reason(conn, "gus@example.com") is None


def test_a_bounce_after_retention_deleted_the_job_still_suppresses_and_counts(
    conn: Conn,
) -> None:
    bid, by = sent(conn, "one", ["ada@example.com"])
    conn.execute("DELETE FROM broadcast_jobs WHERE broadcast_id = %s", (bid,))
    bounce(conn, "postfix-unknown-user", bid, by["ada@example.com"])
    assert reason(conn, "ada@example.com") is not None
    assert count(conn, bid).bounced_later == 1


def test_later_bounces_and_complaints_show_on_every_surface(conn: Conn, db_url: str) -> None:
    emails = [f"r{i}@example.com" for i in range(100)]
    bid, by = sent(conn, "one", emails)
    cid = conn.execute("SELECT campaign_id FROM broadcasts WHERE id = %s", (bid,)).fetchone()
    assert cid is not None
    cid = cid["campaign_id"]
    bounce(conn, "postfix-unknown-user", bid, by["r1@example.com"])
    bounce(conn, "mailbox-full", bid, by["r2@example.com"])
    bounce(conn, "arf-abuse", bid, by["r3@example.com"])
    env = worker_env(db_url, "smtp://127.0.0.1:1")
    done = senddock(env, "campaign", "status", str(cid), "--json")
    assert done.returncode == 0, done.stderr
    st = json.loads(done.stdout)
    later = ("bounced_later", "soft_later", "policy_later", "complaints", "complaint_rate")
    assert tuple(st[k] for k in later) == (1, 1, 0, 1, 0.01)
    text = senddock(env, "campaign", "status", str(cid)).stdout
    assert "bounced 1, soft 1, policy 0, complaints 1 (1.00% of sent; over Gmail's 0.3 %)" in text
    make_admin(db_url, EMAIL, PASSWORD)
    with start_server(db_url, "smtp://127.0.0.1:1", workers=False) as server:
        with server.client(make_token(db_url)) as api:
            detail = api.get(f"/api/v1/campaigns/{cid}").json()
            assert tuple(detail[k] for k in later) == (1, 1, 0, 1, 0.01)
            metrics = api.get("/metrics").text
            assert 'senddock_later_bounces{kind="hard"} 1.0' in metrics
            assert 'senddock_later_bounces{kind="complaint"} 1.0' in metrics
        with httpx.Client(base_url=server.url, timeout=30) as dash:
            token = re.search(r'name="csrf" value="([^"]+)"', dash.get("/login").text)
            assert token is not None
            login = {"csrf": token.group(1), "email": EMAIL, "password": PASSWORD, "next": "/"}
            assert dash.post("/login", data=login).status_code == 303
            page = dash.get(f"/campaigns/{cid}").text
            fields = dict(re.findall(r'data-field="(\w+)">([^<]*)<', page))
            assert (fields["bounced_later"], fields["complaints"]) == ("1", "1")
            assert fields["complaint_percent"] == "1.00"
