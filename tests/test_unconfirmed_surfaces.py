"""Issue 23 on its surfaces: the API, the dashboard and /metrics show and act on the
`unconfirmed` jobs, and a late 250 after a lease lapse still lands (queue layer).

Unconfirmed jobs are made the way a worker and a rescue make them: claimed by an owner, their
final dot marked (record_group with dots), then the owner rescued as dead (queue.rescue).
A real Postgres, a real `senddock serve`, a real worker and SMTP catcher; no mocks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.rows import dict_row

from senddock import campaigns, queue
from senddock.delivery.outcome import Reply, Transition
from senddock.queue import Dot, Job, Outcome
from senddock.testing import Catcher
from senddock.web import auth
from support import Conn, ThreadWorker, jobs, send_campaign, senddock, wait_until, worker_env
from test_dashboard import EMAIL, PASSWORD, csrf_of, log_in
from web_support import ServerFactory, make_token, servers

OWNER = 7  # an owner id no live worker has
RELAY = "relay-23.example.net:2525"
SENT = Transition("sent")
OK = Reply("data", 250, "2.0.0 queued")


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    yield from servers(db_url)


async def _unconfirm(db_url: str, n: int, owner: int = OWNER) -> list[Job]:
    """Claim `n` jobs as `owner`, mark their final dots to RELAY, rescue the owner as dead:
    the state a worker SIGKILLed after its dots leaves behind."""
    async with await psycopg.AsyncConnection.connect(
        db_url, autocommit=True, row_factory=dict_row
    ) as c:
        claimed = await queue.claim(c, owner, n)
        assert len(claimed) == n
        marked = await queue.record_group(c, owner, [], [Dot(j, RELAY) for j in claimed])
        assert marked.dots == {j.id for j in claimed}
        assert await queue.rescue(c, [owner]) == n
    return claimed


def unconfirm(db_url: str, n: int, owner: int = OWNER) -> list[Job]:
    return asyncio.run(_unconfirm(db_url, n, owner))


def statuses(conn: Conn, bid: int) -> dict[str, str]:
    return {e: str(r["status"]) for e, r in jobs(conn, bid).items()}


def _record(db_url: str, owner: int, job: Job) -> set[int]:
    async def run() -> set[int]:
        async with await psycopg.AsyncConnection.connect(
            db_url, autocommit=True, row_factory=dict_row
        ) as c:
            return await queue.record_many(c, owner, [Outcome(job, SENT, OK)])

    return asyncio.run(run())


def test_api_shows_confirms_and_resends_the_unconfirmed(
    db_url: str, conn: Conn, catcher: Catcher, serve: ServerFactory
) -> None:
    """GET shows `unconfirmed: N`; confirm returns N and makes them sent; resend on another
    campaign puts them back (same Message-ID) and a worker delivers each exactly once."""
    first = [f"a{i}@example.org" for i in range(3)]
    cid, bid = send_campaign(conn, "news", first, name="first")
    unconfirm(db_url, 3)
    assert set(statuses(conn, bid).values()) == {"unconfirmed"}
    server = serve(workers=False)
    with server.client(make_token(db_url)) as c:
        st = c.get(f"/api/v1/campaigns/{cid}").json()
        assert (st["unconfirmed"], st["sent"]) == (3, 0)
        assert {u["email"] for u in st["unconfirmed_jobs"]} == set(first)
        r = c.post(f"/api/v1/campaigns/{cid}/confirm")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["unconfirmed"] == 3
        assert (body["campaign"]["sent"], body["campaign"]["unconfirmed"]) == (3, 0)
        assert set(statuses(conn, bid).values()) == {"sent"}
        st = c.get(f"/api/v1/campaigns/{cid}").json()
        assert (st["sent"], st["unconfirmed"]) == (3, 0)
        # A second confirm finds nothing left.
        assert c.post(f"/api/v1/campaigns/{cid}/confirm").json()["unconfirmed"] == 0

        second = [f"b{i}@example.org" for i in range(4)]
        cid2, bid2 = send_campaign(conn, "other", second, name="second")
        unconfirm(db_url, 4)
        before = {e: r["message_id"] for e, r in jobs(conn, bid2).items()}
        assert c.get(f"/api/v1/campaigns/{cid2}").json()["unconfirmed"] == 4
        r = c.post(f"/api/v1/campaigns/{cid2}/resend-unconfirmed")
        assert r.status_code == 200, r.text
        assert r.json()["unconfirmed"] == 4 and r.json()["campaign"]["unconfirmed"] == 0
        rows = jobs(conn, bid2)
        assert {str(row["status"]) for row in rows.values()} <= {"pending", "retry"}
        assert {e: row["message_id"] for e, row in rows.items()} == before
        assert catcher.received_count() == 0
        with ThreadWorker(db_url, catcher.url, concurrency=2):
            assert wait_until(lambda: set(statuses(conn, bid2).values()) == {"sent"}, 30)
        assert catcher.count_by_rcpt() == dict.fromkeys(second, 1)
        got_ids = {m.rcpt: m.message_id for m in catcher.received()}
        assert got_ids == before
        assert c.get(f"/api/v1/campaigns/{cid2}").json()["sent"] == 4

        for action in ("confirm", "resend-unconfirmed"):
            missing = c.post(f"/api/v1/campaigns/999999/{action}")
            assert missing.status_code == 404, (action, missing.text)
    with server.client() as anonymous:
        for action in ("confirm", "resend-unconfirmed"):
            assert anonymous.post(f"/api/v1/campaigns/{cid}/{action}").status_code == 401


def test_confirm_and_resend_act_on_only_the_jobs_named(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    """What a person does with the relay's log in hand: confirm the jobs it shows, resend the
    others (API body `jobs`, CLI --job); the jobs not named stay unconfirmed."""
    cid, bid = send_campaign(
        conn, "news", ["a@example.org", "ü@bücher.example", "c@example.org", "d@example.org"]
    )
    held = {j.email: j.id for j in unconfirm(db_url, 4)}
    emails = sorted(held)  # as stored
    server = serve(workers=False)
    with server.client(make_token(db_url)) as c:
        r = c.post(f"/api/v1/campaigns/{cid}/confirm", json={"jobs": [held[emails[0]]]})
        assert r.status_code == 200 and r.json()["unconfirmed"] == 1, r.text
        r = c.post(f"/api/v1/campaigns/{cid}/resend-unconfirmed", json={"jobs": [held[emails[1]]]})
        assert r.status_code == 200 and r.json()["unconfirmed"] == 1, r.text
        assert c.post(f"/api/v1/campaigns/{cid}/confirm", json={"jobs": ["x"]}).status_code == 422
    env = worker_env(db_url, "smtp://127.0.0.1:1")
    done = senddock(env, "campaign", "confirm", str(cid), "--job", str(held[emails[2]]))
    assert done.returncode == 0, done.stderr
    assert "1 unconfirmed recipients confirmed sent" in done.stdout
    st = statuses(conn, bid)
    assert st[emails[0]] == st[emails[2]] == "sent"
    assert st[emails[1]] in ("pending", "retry")
    assert st[emails[3]] == "unconfirmed"
    shown = senddock(env, "campaign", "status", str(cid))
    assert f"job {held[emails[3]]}  {emails[3]}" in shown.stdout, shown.stdout


def test_metrics_count_the_unconfirmed(db_url: str, conn: Conn, serve: ServerFactory) -> None:
    cid, _ = send_campaign(conn, "news", [f"m{i}@example.org" for i in range(5)])
    unconfirm(db_url, 2)
    server = serve(workers=False)

    def value(text: str, sample: str) -> float:
        m = re.search(r"^" + re.escape(sample) + r" (\S+)$", text, re.M)
        assert m is not None, (sample, text)
        return float(m.group(1))

    unconfirmed = 'senddock_queue_jobs{status="unconfirmed"}'
    with server.client(make_token(db_url)) as c:
        text = c.get("/metrics").text
        assert value(text, unconfirmed) == 2
        assert value(text, 'senddock_queue_jobs{status="pending"}') == 3
        assert c.post(f"/api/v1/campaigns/{cid}/confirm").json()["unconfirmed"] == 2
        text = c.get("/metrics").text
        assert value(text, unconfirmed) == 0
        assert value(text, 'senddock_messages{outcome="sent"}') == 2


def _form(page: str, action: str) -> str:
    """The opening tag of the form posting to `action`."""
    found = re.search(r'<form method="post" action="' + re.escape(action) + r'"[^>]*>', page)
    assert found, f"no form for {action}"
    return found.group(0)


def test_dashboard_lists_the_unconfirmed_and_confirms_only_with_the_csrf_token(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    auth.create_admin(conn, EMAIL, PASSWORD)
    emails = ["ada@example.org", "bob@example.org"]
    cid, bid = send_campaign(conn, "news", emails)
    unconfirm(db_url, 2)
    server = serve(workers=False)
    with server.client(follow_redirects=False) as http:
        assert log_in(http).status_code == 303
        page = http.get(f"/campaigns/{cid}").text
        block = re.search(r"<section[^>]*data-unconfirmed[^>]*>.*?</section>", page, re.S)
        assert block, page
        assert " hidden" not in block.group(0).split(">", 1)[0]
        for e in emails:
            assert e in block.group(0)
        assert block.group(0).count(RELAY) == 2
        for action in ("confirm", "resend-unconfirmed"):
            assert " hidden" not in _form(page, f"/campaigns/{cid}/{action}")
        token = csrf_of(page)

        for data in ({}, {"csrf": "forged"}, {"csrf": token[:-1]}):
            for action in ("confirm", "resend-unconfirmed"):
                r = http.post(f"/campaigns/{cid}/{action}", data=data)
                assert r.status_code == 403, (action, data)
        assert statuses(conn, bid) == dict.fromkeys(emails, "unconfirmed")

        r = http.post(f"/campaigns/{cid}/confirm", data={"csrf": token})
        assert r.status_code == 303, r.text
        assert statuses(conn, bid) == dict.fromkeys(emails, "sent")
        page = http.get(f"/campaigns/{cid}").text
        assert "2 unconfirmed recipients confirmed sent" in page
        assert campaigns.status(conn, cid).counts.sent == 2


def test_a_late_250_after_a_lease_lapse_lands_only_with_the_same_owner_and_attempt(
    db_url: str, conn: Conn
) -> None:
    """A job rescued as unconfirmed keeps its owner and attempt: that owner's late outcome
    (it was only cut off from the database) makes it sent; a record fenced by another attempt
    or another owner changes nothing."""
    emails = ["late@example.org", "stale@example.org", "peer@example.org"]
    _, bid = send_campaign(conn, "news", emails)
    claimed = {j.email: j for j in unconfirm(db_url, 3)}
    rows = jobs(conn, bid)
    assert all(rows[e]["status"] == "unconfirmed" and rows[e]["owner"] == OWNER for e in emails)
    before = {e: dict(r) for e, r in rows.items()}

    late = claimed["late@example.org"]
    assert _record(db_url, OWNER, late) == {late.id}
    stale = claimed["stale@example.org"]
    assert _record(db_url, OWNER, dataclasses.replace(stale, attempts=stale.attempts + 1)) == set()
    peer = claimed["peer@example.org"]
    assert _record(db_url, OWNER + 1, peer) == set()

    rows = jobs(conn, bid)
    assert rows["late@example.org"]["status"] == "sent"
    assert rows["late@example.org"]["last_code"] == 250
    assert rows["late@example.org"]["sent_at"] is not None
    for e in ("stale@example.org", "peer@example.org"):
        assert rows[e] == before[e], e
