"""Issue 41, item 3: one page lists the unconfirmed recipients of every campaign, with what
each source said, and offers one action for all that remain; the API gives the same.

Unconfirmed jobs are made as a worker and a rescue make them (claimed, final dot marked,
owner rescued as dead: tests/test_unconfirmed_surfaces.py). A real Postgres and a real
`senddock serve` (no workers: what is resent stays queued, to be counted); no mocks.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from senddock import campaigns, queue
from senddock.campaigns import unconfirmed
from senddock.campaigns.unconfirmed import SHOWN_JOBS
from senddock.db import connect
from senddock.errors import Conflict
from senddock.queue import Dot, Job, Note
from senddock.web import auth
from support import Conn, jobs, send_campaign, wait_until
from test_dashboard import EMAIL, PASSWORD, csrf_of, log_in
from web_support import Server, ServerFactory, make_token, servers

RELAY = "relay-41.example.net:2525"
OTHER_RELAY = "backup-41.example.net:2525"
# An address a page must escape (an apostrophe and an ampersand are plain atext in a local
# part) at an internationalised domain, and a campaign name that is markup.
ODD = "o'brien&co@bücher.example"
ODD_SHOWN = "o&#39;brien&amp;co@bücher.example"
MARKUP = "<b>Spring</b> & co"
MARKUP_SHOWN = "&lt;b&gt;Spring&lt;/b&gt; &amp; co"
EMPTY = "Nothing waits for a decision: no recipient is unconfirmed."


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    yield from servers(db_url)


async def _unconfirm(db_url: str, n: int, owner: int, relay: str) -> list[Job]:
    async with await psycopg.AsyncConnection.connect(
        db_url, autocommit=True, row_factory=dict_row
    ) as c:
        claimed = await queue.claim(c, owner, n)
        assert len(claimed) == n
        marked = await queue.record_group(c, owner, [], [Dot(j, relay) for j in claimed])
        assert marked.dots == {j.id for j in claimed}
        assert await queue.rescue(c, [owner]) == n
    return claimed


def unconfirm(db_url: str, n: int, owner: int, relay: str = RELAY) -> list[Job]:
    """Claim the next `n` claimable jobs as `owner`, mark their dots to `relay` and rescue the
    owner as dead: what a worker SIGKILLed after its dots leaves behind."""
    return asyncio.run(_unconfirm(db_url, n, owner, relay))


def statuses(conn: Conn, bid: int) -> dict[str, str]:
    return {e: str(r["status"]) for e, r in jobs(conn, bid).items()}


def sections(page: str) -> dict[int, str]:
    """Each campaign's block on the page, by campaign id, in page order."""
    found = re.findall(
        r'<section class="card"[^>]*data-waiting="(\d+)">(.*?)</section>', page, re.S
    )
    return {int(cid): body for cid, body in found}


def count_in(block: str) -> int:
    found = re.search(r"<span data-count>(\d+)</span>", block)
    assert found, block
    return int(found.group(1))


def rows_in(block: str) -> int:
    return block.count('<tr><td class="num">')


def badge(page: str) -> int | None:
    """The navigation's count of unconfirmed recipients; None when it shows none."""
    found = re.search(r"<span [^>]*data-nav-unconfirmed[^>]*>(\d+)</span>", page)
    return int(found.group(1)) if found else None


def resend_form(page: str) -> dict[str, str]:
    """The hidden fields of the one action's form."""
    form = re.search(r'<form method="post" action="/unconfirmed/resend".*?</form>', page, re.S)
    assert form, page
    fields = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', form.group(0))
    return dict(fields)


@contextmanager
def logged_in_client(server: Server) -> Iterator[httpx.Client]:
    """A client with a dashboard session."""
    with httpx.Client(base_url=server.url, timeout=30, follow_redirects=False) as http:
        assert log_in(http).status_code == 303
        yield http


def flash_after(http: httpx.Client, response: httpx.Response) -> tuple[str, str]:
    """Follow a form's 303 back to the page: (the page, its flash message)."""
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/unconfirmed"
    page = http.get("/unconfirmed").text
    found = re.search(r'<p class="flash (\w+)" role="status">(.*?)</p>', page, re.S)
    assert found, page
    return page, f"{found.group(1)}: {found.group(2)}"


def test_one_page_lists_every_waiting_campaign_with_exact_counts_and_each_sources_word(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    """Two campaigns with unconfirmed jobs (3 of 3, 2 of 4) and one without: the page lists
    the two, newest first, with their exact counts (the campaign page's), every job with its
    relay and what each source said (escaped), the nav's badge on every page says 5, and
    GET /api/v1/unconfirmed says the same. (Fails without the page, the badge and the API.)"""
    auth.create_admin(conn, EMAIL, PASSWORD)
    older = [ODD, "zoë@example.org", "ann@example.org"]
    cid_a, bid_a = send_campaign(conn, "spring", older, name=MARKUP)
    held_a = unconfirm(db_url, 3, owner=7)
    cid_b, _ = send_campaign(conn, "summer", [f"s{i}@example.org" for i in range(4)], "b")
    held_b = unconfirm(db_url, 2, owner=8)
    cid_quiet, _ = send_campaign(conn, "quiet", ["q@example.org"], name="quiet")
    odd = next(j for j in held_a if j.email == ODD)
    with conn.transaction():  # what a reconcile kept of the odd one (campaigns/reconcile.py)
        queue.note_reconcile(
            conn,
            bid_a,
            [
                Note(odd.id, "relay-log", "cannot tell", "the log ends at <10:00>"),
                Note(odd.id, "mailgun", "not seen", "no event"),
            ],
        )
    assert campaigns.status(conn, cid_a).counts.unconfirmed == 3
    assert campaigns.status(conn, cid_b).counts.unconfirmed == 2

    server = serve(workers=False)
    with logged_in_client(server) as http:
        page = http.get("/unconfirmed")
        assert page.status_code == 200, page.text
        text = page.text
        shown = sections(text)
        assert list(shown) == [cid_b, cid_a]  # newest first; the quiet one is not there
        assert cid_quiet not in shown
        assert (count_in(shown[cid_a]), count_in(shown[cid_b])) == (3, 2)
        assert (rows_in(shown[cid_a]), rows_in(shown[cid_b])) == (3, 2)
        assert f'href="/campaigns/{cid_a}#unconfirmed"' in shown[cid_a]
        assert MARKUP_SHOWN in shown[cid_a] and MARKUP not in text
        assert "Hello {{ subscriber.name }}" in shown[cid_a]  # the subject, as the list shows it
        assert ODD_SHOWN in shown[cid_a] and ODD not in text
        for e in ("zoë@example.org", "ann@example.org"):
            assert e in shown[cid_a]
        for j in held_b:
            assert j.email in shown[cid_b]
        assert text.count(RELAY) == 5
        odd_row = next(r for r in shown[cid_a].split("</tr>") if ODD_SHOWN in r)
        assert "mailgun: not seen" in odd_row and "relay-log: cannot tell" in odd_row
        assert 'title="the log ends at &lt;10:00&gt;"' in odd_row
        assert shown[cid_a].count("not asked yet") == 2
        assert shown[cid_b].count("not asked yet") == 2
        assert "Resend the 5 still unconfirmed" in text
        assert resend_form(text)["seen"] == "5"
        assert EMPTY not in text
        for path in ("/unconfirmed", "/", f"/campaigns/{cid_b}", "/subscribers"):
            assert badge(http.get(path).text) == 5, path

    with server.client(make_token(db_url)) as api:
        r = api.get("/api/v1/unconfirmed")
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["total"], body["resendable"]) == (5, 5)
        assert body["fingerprint"] == resend_form(text)["fingerprint"]
        got = {c["id"]: c for c in body["campaigns"]}
        assert [c["id"] for c in body["campaigns"]] == [cid_b, cid_a]
        assert (got[cid_a]["unconfirmed"], got[cid_b]["unconfirmed"]) == (3, 2)
        assert (got[cid_a]["more"], got[cid_a]["resendable"]) == (0, True)
        assert (got[cid_a]["name"], got[cid_a]["state"]) == (MARKUP, "waiting for a decision")
        assert {j["email"] for j in got[cid_a]["jobs"]} == set(older)
        assert {j["relay"] for j in got[cid_b]["jobs"]} == {RELAY}
        odd_job = next(j for j in got[cid_a]["jobs"] if j["email"] == ODD)
        assert odd_job["said"] == [
            {"source": "mailgun", "said": "not seen", "detail": "no event"},
            {"source": "relay-log", "said": "cannot tell", "detail": "the log ends at <10:00>"},
        ]
        assert odd_job["dot_at"] is not None and odd_job["message_id"]
    with server.client() as anonymous:
        assert anonymous.get("/api/v1/unconfirmed").status_code == 401
    with httpx.Client(base_url=server.url, follow_redirects=False) as stranger:
        r = stranger.get("/unconfirmed")
        assert (r.status_code, r.headers["location"]) == (303, "/login?next=/unconfirmed")


def test_the_page_and_the_api_bound_the_jobs_listed_never_the_counts(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    """SHOWN_JOBS + 3 unconfirmed: the page lists SHOWN_JOBS with "and 3 more" linking to the
    campaign's unconfirmed recipients, the count and the button say all of them; the API
    lists `per_campaign`. (Fails without the bound: the page listed every job.)"""
    auth.create_admin(conn, EMAIL, PASSWORD)
    n = SHOWN_JOBS + 3
    cid, _ = send_campaign(conn, "big", [f"r{i:04}@example.org" for i in range(n)])
    unconfirm(db_url, n, owner=9)
    server = serve(workers=False)
    with logged_in_client(server) as http:
        text = http.get("/unconfirmed").text
        block = sections(text)[cid]
        assert (count_in(block), rows_in(block)) == (n, SHOWN_JOBS)
        link = f'<a href="/campaigns/{cid}?status=unconfirmed#recipients" data-more>and 3 more</a>'
        assert link in block
        assert f"Resend the {n} still unconfirmed" in text and badge(text) == n
        recipients = http.get(f"/campaigns/{cid}?status=unconfirmed").text
        assert 'id="recipients"' in recipients
    with server.client(make_token(db_url)) as api:
        body = api.get("/api/v1/unconfirmed", params={"per_campaign": 5}).json()
        (only,) = body["campaigns"]
        assert (len(only["jobs"]), only["more"], only["unconfirmed"]) == (5, n - 5, n)
        assert len(api.get("/api/v1/unconfirmed").json()["campaigns"][0]["jobs"]) == SHOWN_JOBS
        too_many = api.get("/api/v1/unconfirmed", params={"per_campaign": SHOWN_JOBS + 1})
        assert too_many.status_code == 422


def test_resend_all_refuses_a_changed_set_then_resends_exactly_the_jobs_seen(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    """The form carries the count and the fingerprint of what it offered. A forged post, a set
    of the same size with one job settled and another unconfirmed since, and a smaller set each
    resend nobody; "Ask the relay" without a source says so and changes nothing. A fresh page's
    form resends exactly its jobs (pending or retry, settled by a person, same Message-ID), and
    the page is then empty and the badge gone. (Fails without the guard: the stale form resent
    the job that turned unconfirmed after it was drawn.)"""
    auth.create_admin(conn, EMAIL, PASSWORD)
    cid_a, bid_a = send_campaign(conn, "spring", [ODD, "zoë@example.org"], name="a")
    held_a = unconfirm(db_url, 2, owner=7)
    cid_b, bid_b = send_campaign(conn, "summer", [f"s{i}@example.org" for i in range(3)], "b")
    unconfirm(db_url, 2, owner=8)
    ids_before = {e: r["message_id"] for b in (bid_a, bid_b) for e, r in jobs(conn, b).items()}
    server = serve(workers=False)
    with logged_in_client(server) as http:
        text = http.get("/unconfirmed").text
        stale = resend_form(text)
        assert stale["seen"] == "4" and stale["csrf"] == csrf_of(text)

        for data in ({}, {"csrf": "forged", "seen": "4", "fingerprint": stale["fingerprint"]}):
            assert http.post("/unconfirmed/resend", data=data).status_code == 403
        assert set(statuses(conn, bid_a).values()) == {"unconfirmed"}

        _, said = flash_after(
            http, http.post("/unconfirmed/reconcile", data={"csrf": stale["csrf"]})
        )
        assert said.startswith("error: no source to ask"), said

        # The same number, another set: one settled elsewhere, the waiting one turned
        # unconfirmed since the page was drawn.
        assert campaigns.confirm(conn, cid_a, [held_a[0].id]) == 1
        late = unconfirm(db_url, 1, owner=10)[0]
        assert campaigns.status(conn, cid_b).counts.unconfirmed == 3
        page, said = flash_after(http, http.post("/unconfirmed/resend", data=stale))
        assert said == (
            "error: The unconfirmed recipients changed since the page was shown (4 to resend"
            " then, 4 now): nobody was sent again. Look again."
        )
        assert statuses(conn, bid_b) == dict.fromkeys(statuses(conn, bid_b), "unconfirmed")
        assert statuses(conn, bid_a)[held_a[1].email.lower()] == "unconfirmed"
        # A smaller set (one confirmed since): refused too.
        newer = resend_form(page)
        assert newer["seen"] == "4" and newer["fingerprint"] != stale["fingerprint"]
        assert campaigns.confirm(conn, cid_b, [late.id]) == 1
        _, said = flash_after(http, http.post("/unconfirmed/resend", data=newer))
        assert "(4 to resend then, 3 now): nobody was sent again" in said
        waiting = {held_a[1].email.lower()} | {
            e for e, s in statuses(conn, bid_b).items() if s == "unconfirmed"
        }
        assert len(waiting) == 3

        page = http.get("/unconfirmed").text
        fresh = resend_form(page)
        assert fresh["seen"] == "3" and "Resend the 3 still unconfirmed" in page
        page, said = flash_after(http, http.post("/unconfirmed/resend", data=fresh))
        assert said == "ok: 3 unconfirmed recipients of 2 campaigns queued again."
        for b in (bid_a, bid_b):
            for e, row in jobs(conn, b).items():
                if e in waiting:
                    assert row["status"] in ("pending", "retry"), (e, row["status"])
                    assert row["settled_by"] == "person"
                else:
                    assert row["status"] in ("sent", "pending"), (e, row["status"])
                assert row["message_id"] == ids_before[e]
        assert statuses(conn, bid_a)[held_a[0].email.lower()] == "sent"
        assert statuses(conn, bid_b)[late.email.lower()] == "sent"
        assert EMPTY in page and sections(page) == {} and badge(page) is None
        assert "/unconfirmed/resend" not in page
        assert badge(http.get("/").text) is None
        # Posting the same form again resends nobody: its set is gone.
        _, said = flash_after(http, http.post("/unconfirmed/resend", data=fresh))
        assert said.startswith("error: The unconfirmed recipients changed"), said
    with server.client(make_token(db_url)) as api:
        body = api.get("/api/v1/unconfirmed").json()
        assert (body["total"], body["resendable"], body["campaigns"]) == (0, 0, [])


def test_a_job_settled_while_the_action_runs_rolls_the_whole_action_back(
    db_url: str, conn: Conn
) -> None:
    """The set checks out, then one of the later campaign's jobs is confirmed (in a transaction
    holding that campaign) before the action reaches it: the action is refused and the earlier
    campaign's jobs, already resent in its transaction, are unconfirmed again. (Fails without
    the count of each campaign's resend: the other jobs of the changed set went.)"""
    _, bid_a = send_campaign(conn, "spring", ["a1@example.org", "a2@example.org"], "a")
    unconfirm(db_url, 2, owner=7)
    cid_b, bid_b = send_campaign(conn, "summer", ["b1@example.org", "b2@example.org"], "b")
    held_b = unconfirm(db_url, 2, owner=8)
    shown = unconfirmed.waiting(conn)
    assert shown.resendable == 4
    refused: list[Conflict] = []

    def act() -> None:
        with connect(db_url) as mine:
            try:
                unconfirmed.resend_seen(mine, shown.resendable, shown.fingerprint)
            except Conflict as exc:
                refused.append(exc)

    def blocked() -> bool:
        row = conn.execute(
            "SELECT count(*) AS n FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
        return row is not None and row["n"] > 0

    with connect(db_url) as other, other.transaction():
        assert queue.lock_campaign(other, cid_b) is not None
        assert queue.confirm(other, bid_b, [held_b[0].id]) == 1
        action = threading.Thread(target=act)
        action.start()
        assert wait_until(blocked, 30)  # it resent campaign A's and waits for B's lock
    action.join(30)
    assert not action.is_alive()
    assert [str(e) for e in refused] == [
        f"Campaign {cid_b} changed while its unconfirmed recipients were being resent (one of"
        " its recipients was settled): nobody was sent again. Look again."
    ]
    assert set(statuses(conn, bid_a).values()) == {"unconfirmed"}
    assert statuses(conn, bid_b) == {held_b[0].email: "sent", held_b[1].email: "unconfirmed"}


def test_a_cancelled_campaigns_unconfirmed_are_listed_but_never_resent(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    """A cancelled campaign's unconfirmed recipients wait for a confirm, never a resend: the
    page lists them and counts them in the badge, the button leaves them out and says so."""
    auth.create_admin(conn, EMAIL, PASSWORD)
    cid_c, bid_c = send_campaign(conn, "gone", ["c1@example.org", "c2@example.org"], "gone")
    unconfirm(db_url, 1, owner=7)
    campaigns.cancel(conn, cid_c)
    cid_s, bid_s = send_campaign(conn, "live", ["ü@bücher.example"], "live")
    unconfirm(db_url, 1, owner=8)
    server = serve(workers=False)
    with logged_in_client(server) as http:
        text = http.get("/unconfirmed").text
        assert list(sections(text)) == [cid_s, cid_c] and badge(text) == 2
        assert "Resend the 1 still unconfirmed" in text
        assert "1 of them belong to cancelled campaigns" in text
        _, said = flash_after(http, http.post("/unconfirmed/resend", data=resend_form(text)))
        assert said == "ok: 1 unconfirmed recipient of 1 campaign queued again."
        assert statuses(conn, bid_s)["ü@bücher.example"] in ("pending", "retry")
        assert sorted(statuses(conn, bid_c).values()) == ["cancelled", "unconfirmed"]
        text = http.get("/unconfirmed").text
        assert list(sections(text)) == [cid_c] and badge(text) == 1
        assert "/unconfirmed/resend" not in text


def _log(path: Path, accepted: dict[str, str]) -> None:
    """A Postfix log (RFC 3339 times) spanning an hour either side of now that shows the
    messages `accepted` (queue id: Message-ID) queued."""
    now = datetime.now(UTC)
    lines = [f"{(now - timedelta(hours=1)).isoformat()} relay postfix/master[1]: daemon started"]
    for queue_id, message_id in accepted.items():
        at = now.isoformat()
        lines.append(f"{at} relay postfix/cleanup[2]: {queue_id}: message-id={message_id}")
        lines.append(f"{at} relay postfix/qmgr[3]: {queue_id}: from=<news@example.org>, nrcpt=1")
    lines.append(f"{(now + timedelta(hours=1)).isoformat()} relay postfix/smtpd[4]: disconnect")
    path.write_text("\n".join(lines) + "\n")


def test_ask_the_relay_reconciles_every_waiting_campaign_and_the_page_shows_what_it_said(
    db_url: str, conn: Conn, serve: ServerFactory, tmp_path: Path
) -> None:
    """The relay's log (SENDDOCK_RECONCILE_LOGS) shows one of campaign A's two jobs queued and
    covers the other's window; campaign B's went to another relay. One click asks about both
    campaigns: A's are settled (one confirmed, one resent), B's stay, each with the log's
    "cannot tell" on the page. (Fails without the action.)"""
    auth.create_admin(conn, EMAIL, PASSWORD)
    cid_a, bid_a = send_campaign(conn, "spring", ["a1@example.org", "a2@example.org"], "a")
    unconfirm(db_url, 2, owner=7)
    cid_b, bid_b = send_campaign(conn, "summer", ["b1@example.org", "b2@example.org"], "b")
    unconfirm(db_url, 2, owner=8, relay=OTHER_RELAY)
    log = tmp_path / "maillog"
    _log(log, {"4A1B2C3D4E": jobs(conn, bid_a)["a1@example.org"]["message_id"]})
    env = {"SENDDOCK_RECONCILE_LOGS": str(log), "SENDDOCK_RECONCILE_LOG_RELAY": RELAY}
    server = serve(workers=False, env=env)
    with logged_in_client(server) as http:
        text = http.get("/unconfirmed").text
        assert list(sections(text)) == [cid_b, cid_a] and badge(text) == 4
        r = http.post("/unconfirmed/reconcile", data={"csrf": csrf_of(text)})
        page, said = flash_after(http, r)
        assert said == (
            "ok: Asked the relay about 2 campaigns: 1 confirmed sent, 1 queued again,"
            " 2 left (no source could tell)."
        )
        rows = jobs(conn, bid_a)
        assert (rows["a1@example.org"]["status"], rows["a1@example.org"]["settled_by"]) == (
            "sent",
            "relay-log",
        )
        assert rows["a2@example.org"]["status"] in ("pending", "retry")
        assert set(statuses(conn, bid_b).values()) == {"unconfirmed"}
        shown = sections(page)
        assert list(shown) == [cid_b] and badge(page) == 2
        assert shown[cid_b].count("relay-log: cannot tell") == 2
        assert f"the job went to {OTHER_RELAY}, the log is {RELAY}&#39;s" in shown[cid_b]
