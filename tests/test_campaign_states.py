"""The states an operator must see, as they are, on every surface (issue 33, item 4).

- A campaign that has drained but for unconfirmed jobs is "waiting for a decision": its own
  word in `campaign status` (text and JSON), `campaign list`, the API (one and the list) and a
  badge on the dashboard (list and page), not "sending 99 %"; a confirm ends it `sent`.
- A campaign with work left and no live worker says so (`campaign status`, API, dashboard).
- `senddock workers`, the API and the workers page call a worker dead as soon as its heartbeat
  is older than the lease (database clock), not only once a peer has buried it.

Before issue 33 every one of these surfaces said `sending` and `live`/`silent`: each assertion
on `state`, `no_live_worker` and `health` fails on that code.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.rows import dict_row

from senddock import queue
from senddock.delivery.outcome import Reply, Transition
from senddock.queue import Dot, Outcome
from senddock.queue.counts import WAITING
from senddock.web import auth
from support import Conn, jobs, send_campaign, senddock, server_older_than_a_lease, worker_env
from test_dashboard import EMAIL, PASSWORD, log_in
from web_support import ServerFactory, make_token, servers

OWNER = 13  # an owner id no live worker has
SENT = Transition("sent")
OK = Reply("data", 250, "2.0.0 queued")
NO_SMTP = "smtp://127.0.0.1:1"


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    yield from servers(db_url)


def cli(db_url: str, *args: str) -> str:
    done = senddock(worker_env(db_url, NO_SMTP), *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def drain_but_one(db_url: str, n: int) -> None:
    """Claim the `n` jobs as a worker does, record all but one sent, mark that one's final dot,
    and rescue the owner as dead: the last job is unconfirmed, nothing else is left."""

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(
            db_url, autocommit=True, row_factory=dict_row
        ) as c:
            claimed = await queue.claim(c, OWNER, n)
            assert len(claimed) == n
            *went, last = claimed
            assert await queue.record_many(c, OWNER, [Outcome(j, SENT, OK) for j in went])
            marked = await queue.record_group(c, OWNER, [], [Dot(last, "relay.example.net:25")])
            assert marked.dots == {last.id}
            assert await queue.rescue(c, [OWNER]) == 1

    asyncio.run(run())


def test_a_drained_campaign_with_unconfirmed_jobs_waits_for_a_decision_on_every_surface(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    emails = ["ann@example.org", "bé@example.org", "cy@xn--bcher-kva.example"]
    cid, bid = send_campaign(conn, "news", emails)
    drain_but_one(db_url, 3)
    assert sorted(str(j["status"]) for j in jobs(conn, bid).values()) == [
        "sent",
        "sent",
        "unconfirmed",
    ]

    st = json.loads(cli(db_url, "campaign", "status", str(cid), "--json"))
    assert (st["status"], st["state"], st["unfinished"], st["unconfirmed"]) == (
        "sending",
        WAITING,
        1,
        1,
    )
    assert st["no_live_worker"] is False  # nothing left for a worker: a person must decide
    assert f"'c': {WAITING}" in cli(db_url, "campaign", "status", str(cid))
    [listed] = [line for line in cli(db_url, "campaign", "list").splitlines()[1:] if line]
    assert WAITING in listed
    assert json.loads(cli(db_url, "campaign", "list", "--json"))[0]["state"] == WAITING

    auth.create_admin(conn, EMAIL, PASSWORD)
    server = serve(workers=False)
    with server.client(make_token(db_url)) as api:
        assert api.get(f"/api/v1/campaigns/{cid}").json()["state"] == WAITING
        [item] = api.get("/api/v1/campaigns").json()["items"]
        assert (item["status"], item["state"]) == ("sending", WAITING)
        metrics = api.get("/metrics").text
        assert f'senddock_open_campaigns{{state="{WAITING}"}} 1.0' in metrics
        assert 'senddock_open_campaigns{state="sending"} 0.0' in metrics
    badge = f'data-status="{WAITING}"'
    with server.client(follow_redirects=False) as http:
        assert log_in(http).status_code == 303
        listing = http.get("/").text
        assert badge in listing
        # Issue 41: the list says how many wait for a decision, and leads to them.
        link = re.search(
            rf'<a class="sub decide" href="/campaigns/{cid}#unconfirmed"[^>]*>', listing
        )
        assert link is not None and "hidden" not in link.group(0), listing
        assert '<span data-field="unconfirmed">1</span> unconfirmed: decide' in listing
        page = http.get(f"/campaigns/{cid}").text
        assert badge in page and 'id="unconfirmed"' in page

    # The decision ends it: confirmed, the campaign is sent, and every surface says so.
    cli(db_url, "campaign", "confirm", str(cid))
    st = json.loads(cli(db_url, "campaign", "status", str(cid), "--json"))
    assert (st["status"], st["state"], st["sent"], st["unfinished"]) == ("sent", "sent", 3, 0)
    with server.client(make_token(db_url, "second")) as api:
        assert api.get(f"/api/v1/campaigns/{cid}").json()["state"] == "sent"
    with server.client(follow_redirects=False) as http:
        assert log_in(http).status_code == 303
        link = re.search(r'<a class="sub decide"[^>]*>', http.get("/").text)
        assert link is not None and " hidden" in link.group(0)  # nothing left to decide


def test_a_campaign_with_work_left_and_no_live_worker_says_so(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    cid, _ = send_campaign(conn, "news", ["ann@example.org", "bob@example.org"])

    st = json.loads(cli(db_url, "campaign", "status", str(cid), "--json"))
    assert (st["state"], st["pending"], st["no_live_worker"]) == ("sending", 2, True)
    assert "no live worker" in cli(db_url, "campaign", "status", str(cid))
    auth.create_admin(conn, EMAIL, PASSWORD)
    server = serve(workers=False)
    with server.client(make_token(db_url)) as api:
        assert api.get(f"/api/v1/campaigns/{cid}").json()["no_live_worker"] is True
    with server.client(follow_redirects=False) as http:
        assert log_in(http).status_code == 303
        page = http.get(f"/campaigns/{cid}").text
        assert '<p class="flash error" data-no-worker>' in page  # shown, not hidden

    # A worker whose heartbeat is fresh (database clock) is live: the warning goes.
    conn.execute(
        "INSERT INTO workers (host, boot_id, pid, pid_started, concurrency)"
        " VALUES ('elsewhere.example', 'b', 1, 's', 5)"
    )
    st = json.loads(cli(db_url, "campaign", "status", str(cid), "--json"))
    assert st["no_live_worker"] is False
    with server.client(follow_redirects=False) as http:
        assert log_in(http).status_code == 303
        assert "data-no-worker hidden" in http.get(f"/campaigns/{cid}").text


def test_a_worker_silent_past_the_lease_is_called_dead_at_once_on_every_surface(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    """Two registered workers, no live peer to bury either: one beat 1 s ago, one 16 s ago
    (the lease is 15 s). The second is dead on the CLI, the API and the workers page."""
    server_older_than_a_lease(conn)  # b.example can be dead only then
    conn.execute(
        "INSERT INTO workers (host, boot_id, pid, pid_started, concurrency, heartbeat_at)"
        " VALUES ('a.example', 'b', 1, 's', 5, now() - interval '1 second'),"
        "        ('b.example', 'b', 2, 's', 5, now() - interval '16 seconds')"
    )

    def beat() -> None:  # a.example's heartbeat, as its own task would keep it
        conn.execute("UPDATE workers SET heartbeat_at = now() WHERE host = 'a.example'")

    beat()
    health = {w["host"]: w["health"] for w in json.loads(cli(db_url, "workers", "--json"))}
    assert health == {"a.example": "live", "b.example": "dead"}
    beat()
    lines = cli(db_url, "workers").splitlines()
    assert "  live  a.example" in lines[0] and "  dead  b.example" in lines[1]

    auth.create_admin(conn, EMAIL, PASSWORD)
    server = serve(workers=False)
    with server.client(make_token(db_url)) as api:
        beat()
        got = {w["host"]: w["health"] for w in api.get("/api/v1/workers").json()}
        assert got == {"a.example": "live", "b.example": "dead"}
    with server.client(follow_redirects=False) as http:
        assert log_in(http).status_code == 303
        beat()
        page = http.get("/workers").text
        assert page.count('data-status="dead"') == 1 and page.count('data-status="live"') == 1
