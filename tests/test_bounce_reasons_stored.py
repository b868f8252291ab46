"""A later bounce's reason is kept and shown, not only its kind (issue 34, migration 0027).

A real broadcast is sent by a real worker to a real SMTP server; returned messages about four
of its jobs are recorded with `store.receive` (as the listener, the poller and the pipe do),
then the rows and every surface that shows them are read: the finding, the job's record, the
suppression, `senddock bounces list` (text and --json), `senddock suppressions list`, and
the API's bounce and suppression lists, the dashboard's suppression page.
"""

from __future__ import annotations

import json

from senddock.testing import Catcher
from senddock.web import auth
from support import Conn, jobs, senddock
from test_bounce_cli import env_for
from test_bounce_effects import back, report, sent, suppressions
from test_dashboard import EMAIL, PASSWORD, logged_in
from web_support import ServerFactory, make_token
from web_support import serve as serve  # the `senddock serve` fixture

# sample (tests/bounces/) → (its recipient, kind, reason)
SAMPLES = {
    "postfix-unknown-user": ("ada@example.com", "hard", "userunknown"),
    "mailbox-full": ("erin@example.net", "soft", "mailboxfull"),
    "arf-abuse": ("quinn@example.com", "complaint", "feedback"),
    "spamhaus-block": ("gus@example.com", "policy", "blocked"),
}


def four_reports(conn: Conn, catcher: Catcher, db_url: str) -> int:
    """A broadcast to the four samples' recipients and one more, each sample returned."""
    emails = [email for email, _, _ in SAMPLES.values()] + ["bob@example.com"]
    bid = sent(conn, catcher, db_url, emails)
    by = jobs(conn, bid)
    for sample, (email, _, _) in SAMPLES.items():
        got = back(conn, report(sample, email, by[email]["message_id"]))
        assert (got.findings, got.matched) == (1, 1)
    return bid


def test_a_later_bounce_keeps_its_reason_on_the_finding_the_job_and_the_suppression(
    conn: Conn, catcher: Catcher, db_url: str
) -> None:
    bid = four_reports(conn, catcher, db_url)
    found = conn.execute("SELECT recipient, kind, reason FROM bounce_findings").fetchall()
    assert {r["recipient"]: (r["kind"], r["reason"]) for r in found} == {
        email: (kind, reason) for email, kind, reason in SAMPLES.values()
    }
    marked = jobs(conn, bid)
    assert {e: (j["bounce_kind"], j["bounce_reason"]) for e, j in marked.items()} == {
        **{email: (kind, reason) for email, kind, reason in SAMPLES.values()},
        "bob@example.com": (None, None),
    }
    # Only the dead address and the complaint are suppressed, each with why.
    assert {e: (r["reason"], r["bounce_reason"]) for e, r in suppressions(conn).items()} == {
        "ada@example.com": ("bounce", "userunknown"),
        "quinn@example.com": ("complaint", "feedback"),
    }


def test_the_reason_is_shown_by_the_commands_and_the_api(
    conn: Conn, catcher: Catcher, db_url: str, serve: ServerFactory
) -> None:
    four_reports(conn, catcher, db_url)
    env = env_for(db_url)
    text = senddock(env, "bounces", "list")
    assert text.returncode == 0, text.stderr
    shown = {
        line.split()[4]: (line.split()[2], line.split()[3]) for line in text.stdout.splitlines()
    }
    assert shown == {email: (kind, reason) for email, kind, reason in SAMPLES.values()}
    as_json = senddock(env, "bounces", "list", "--json", "--reason", "mailboxfull")
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [(r["recipient"], r["kind"], r["reason"]) for r in rows] == [
        ("erin@example.net", "soft", "mailboxfull")
    ]
    refused = senddock(env, "bounces", "list", "--reason", "nosuchreason")
    assert refused.returncode == 2
    listed = senddock(env, "suppressions", "list")
    assert [line.split()[:3] for line in listed.stdout.splitlines()] == [
        ["ada@example.com", "bounce", "(userunknown)"],
        ["quinn@example.com", "complaint", "(feedback)"],
    ]
    server = serve(workers=False)
    with server.client(make_token(db_url)) as c:
        everything = c.get("/api/v1/bounces").json()
        dead = c.get("/api/v1/bounces", params={"reason": "userunknown"}).json()
        policy = c.get("/api/v1/bounces", params={"kind": "policy", "limit": 1}).json()
        hostile = c.get("/api/v1/bounces", params={"reason": "x' OR 1=1 --"})
        gone = c.get("/api/v1/suppressions").json()
    auth.create_admin(conn, EMAIL, PASSWORD)
    with logged_in(server) as (http, _):
        page = http.get("/suppressions").text
    table = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    assert '<td>bounce <span class="hint">userunknown</span></td>' in table
    assert '<td>complaint <span class="hint">feedback</span></td>' in table
    assert {i["recipient"]: i["reason"] for i in everything["items"]} == {
        email: reason for email, _, reason in SAMPLES.values()
    }
    assert everything["more"] == 0
    assert [(i["recipient"], i["kind"]) for i in dead["items"]] == [("ada@example.com", "hard")]
    assert [i["reason"] for i in policy["items"]] == ["blocked"]
    assert hostile.status_code == 422
    assert {g["email"]: g["bounce_reason"] for g in gone} == {
        "ada@example.com": "userunknown",
        "quinn@example.com": "feedback",
    }
