"""The preference centre (issue 22.5), through a real `senddock serve`: a subscriber follows the
link in their message, leaves or rejoins lists, or unsubscribes from everything; the next
broadcast's total shows it; forged or stale tokens change nothing; one-click in both settings."""

from __future__ import annotations

import email
import email.policy
import re
import time
from collections.abc import Iterator

import httpx
import pytest

from senddock.campaigns import broadcast, create_campaign
from senddock.campaigns.compose import link_key
from senddock.config import Settings
from senddock.messages import PREFERENCES, UNSUBSCRIBE, sign
from senddock.testing import Catcher
from senddock.web.preferences import form_token
from support import (
    Conn,
    ThreadWorker,
    jobs,
    seed_list,
    senddock,
    unfinished,
    wait_until,
    worker_env,
)
from web_support import Server, ServerFactory, servers

ZOE = "zoë@bücher.example"
ZOE_WIRE = "zoë@xn--bcher-kva.example"  # what the relay sees (IDNA A-label)
PEOPLE = [ZOE, "ada@example.com", "grace@example.com"]
FORM = re.compile(r'name="form" value="([^"]+)"')


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    yield from servers(db_url)


def seed(conn: Conn) -> dict[str, int]:
    """news and offers, both with all of PEOPLE; Zoë's name is non-ASCII. The list ids."""
    ids = {name: seed_list(conn, name, PEOPLE) for name in ("news", "offers")}
    conn.execute("UPDATE subscribers SET name = 'Zoë Bücher' WHERE email = %s", (ZOE,))
    return ids


def campaign(conn: Conn, lists: str | list[str], name: str = "c") -> int:
    return create_campaign(
        conn,
        name=name,
        list_name=lists,
        subject="Hi {{ subscriber.name }}",
        from_addr="News <news@example.org>",
        text_body="Hi {{ subscriber.name }}\nChoose your lists: {{ preferences_url }}\n",
    )


def subscriber_id(conn: Conn, address: str) -> int:
    row = conn.execute("SELECT id FROM subscribers WHERE email = %s", (address,)).fetchone()
    assert row is not None
    return int(row["id"])


def key(conn: Conn, db_url: str) -> bytes:
    return link_key(conn, Settings(database_url=db_url))


def page_path(conn: Conn, db_url: str, address: str, campaign_id: int) -> str:
    token = sign(key(conn, db_url), PREFERENCES, subscriber_id(conn, address), campaign_id)
    return f"/preferences/{token}"


def statuses(conn: Conn, address: str) -> dict[str, str]:
    rows = conn.execute(
        "SELECT l.name, m.status FROM list_memberships m JOIN lists l ON l.id = m.list_id"
        " JOIN subscribers s ON s.id = m.subscriber_id WHERE s.email = %s",
        (address,),
    ).fetchall()
    return {r["name"]: r["status"] for r in rows}


def events(conn: Conn) -> list[tuple[str, str | None, str, int | None]]:
    rows = conn.execute(
        "SELECT e.action, l.name, e.source, e.campaign_id FROM subscription_events e"
        " LEFT JOIN lists l ON l.id = e.list_id ORDER BY e.id"
    ).fetchall()
    return [(r["action"], r["name"], r["source"], r["campaign_id"]) for r in rows]


def choose(
    client: httpx.Client, path: str, action: str, list_id: int | None = None
) -> httpx.Response:
    """Submit one of the page's forms, as a browser would, with the page's own form token."""
    page = client.get(path)
    assert page.status_code == 200, page.text
    found = FORM.search(page.text)
    assert found is not None
    data = {"form": found.group(1), "action": action}
    if list_id is not None:
        data["list"] = str(list_id)
    return client.post(path, data=data)


def next_total(conn: Conn, lists: str, name: str) -> tuple[int, set[str]]:
    """Start the next broadcast to `lists`: its total and who is in it."""
    bid, total, _ = broadcast(conn, campaign(conn, lists, name))
    return total, set(jobs(conn, bid))


def test_leaving_a_list_on_the_page_shows_in_the_next_broadcasts_total(
    db_url: str, conn: Conn, catcher: Catcher, serve: ServerFactory
) -> None:
    lists = seed(conn)
    server = serve(workers=False)
    first = campaign(conn, "news", "first")
    bid, _, _ = broadcast(conn, first)
    with ThreadWorker(db_url, catcher.url, public_url=server.url):
        assert catcher.wait_for(3, timeout=60)
        assert wait_until(lambda: unfinished(conn, bid) == 0)

    # The link in Zoë's own message.
    got = next(r for r in catcher.received() if r.rcpt == ZOE_WIRE)
    msg = email.message_from_bytes(got.data, policy=email.policy.default)
    body = msg.get_body(("plain",))
    assert body is not None
    url = re.search(r"(http\S+/preferences/\S+)", body.get_content())
    assert url is not None and url.group(1).startswith(server.url + "/preferences/")
    path = url.group(1)[len(server.url) :]

    with server.client() as client:
        page = client.get(path)
        assert page.status_code == 200
        assert "Zoë Bücher" in page.text and ZOE in page.text
        assert "news" in page.text and "offers" in page.text
        assert events(conn) == []  # a GET (a link scanner) changes nothing

        left = choose(client, path, "leave", lists["news"])
        assert left.status_code == 200 and "You left news." in left.text
    assert statuses(conn, ZOE) == {"news": "unsubscribed", "offers": "confirmed"}
    assert events(conn) == [("leave", "news", "preferences page", first)]
    row = conn.execute("SELECT created_at FROM subscription_events").fetchone()
    assert row is not None and row["created_at"] is not None

    total, who = next_total(conn, "news", "second")
    assert total == 2 and ZOE not in who
    total, who = next_total(conn, "offers", "third")
    assert total == 3 and ZOE in who

    # Rejoining puts her back in the next one.
    with server.client() as client:
        joined = choose(client, path, "join", lists["news"])
        assert joined.status_code == 200 and "You joined news." in joined.text
    total, who = next_total(conn, "news", "fourth")
    assert total == 3 and ZOE in who


def test_unsubscribing_from_everything_suppresses_and_rejoining_lifts_it(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    lists = seed(conn)
    server = serve(workers=False)
    cid = campaign(conn, "news")
    path = page_path(conn, db_url, ZOE, cid)
    with server.client() as client:
        gone = choose(client, path, "unsubscribe_all")
        assert gone.status_code == 200 and "unsubscribed from everything" in gone.text
    assert statuses(conn, ZOE) == {"news": "unsubscribed", "offers": "unsubscribed"}
    rows = conn.execute("SELECT reason, detail FROM suppressions").fetchall()
    assert rows == [{"reason": "unsubscribe", "detail": "preferences page"}]
    assert events(conn) == [("unsubscribe_all", None, "preferences page", cid)]
    assert next_total(conn, "offers", "after")[0] == 2

    with server.client() as client:
        assert choose(client, path, "join", lists["offers"]).status_code == 200
    assert conn.execute("SELECT count(*) AS n FROM suppressions").fetchone() == {"n": 0}
    assert statuses(conn, ZOE) == {"news": "unsubscribed", "offers": "confirmed"}
    assert next_total(conn, "offers", "again")[0] == 3

    # A bounce is not the subscriber's to undo: rejoining is refused, nothing changes.
    conn.execute("INSERT INTO suppressions (email, reason) VALUES ('ada@example.com', 'bounce')")
    ada = page_path(conn, db_url, "ada@example.com", cid)
    with server.client() as client:
        assert choose(client, ada, "leave", lists["news"]).status_code == 200
        refused = choose(client, ada, "join", lists["news"])
    assert refused.status_code == 409 and "bounced" in refused.text
    assert statuses(conn, "ada@example.com")["news"] == "unsubscribed"


def test_forged_stale_or_foreign_tokens_get_403_or_404_and_change_nothing(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    lists = seed(conn)
    private = seed_list(conn, "staff", ["grace@example.com"])
    server = serve(workers=False)
    cid = campaign(conn, "news")
    path = page_path(conn, db_url, ZOE, cid)
    sid = subscriber_id(conn, ZOE)
    k = key(conn, db_url)
    now = int(time.time() // 60)
    leave = {"action": "leave", "list": str(lists["news"])}

    with server.client() as client:
        forged = path[:-1] + ("A" if path[-1] != "A" else "B")
        assert client.get(forged).status_code == 403
        assert client.post(forged, data={**leave, "form": form_token(k, sid)}).status_code == 403
        # An unsubscribe link's token opens no preference page (its own purpose).
        unsub = f"/preferences/{sign(k, UNSUBSCRIBE, sid, cid)}"
        assert client.get(unsub).status_code == 403
        # A subscriber deleted since: 404.
        assert client.get(f"/preferences/{sign(k, PREFERENCES, 10**9, cid)}").status_code == 404

        # The form token: missing, expired, another subscriber's, forged.
        other = subscriber_id(conn, "ada@example.com")
        for bad in ("", form_token(k, sid, now - 500), form_token(k, other), "1.2.xyz"):
            answer = client.post(path, data={**leave, "form": bad})
            assert answer.status_code == 403, bad
        # A list the page does not show (private, not a member): 404.
        page = client.get(path)
        assert "staff" not in page.text
        assert choose(client, path, "join", private).status_code == 404
        assert choose(client, path, "dance", lists["news"]).status_code == 422
        # The page's body is capped like every public one.
        huge = client.post(path, content=b"x" * (65 * 1024), headers={"content-type": "text/plain"})
        assert huge.status_code == 413
    assert events(conn) == []
    assert statuses(conn, ZOE) == {"news": "confirmed", "offers": "confirmed"}

    # Made public, a list shows on everyone's page and can be joined.
    done = senddock(worker_env(db_url, "smtp://127.0.0.1:1"), "lists", "set", "staff", "--public")
    assert done.returncode == 0, done.stderr
    with server.client() as client:
        assert "staff" in client.get(path).text
        assert choose(client, path, "join", private).status_code == 200
    assert statuses(conn, ZOE)["staff"] == "confirmed"


@pytest.mark.parametrize("setting", ["suppress", "lists"])
def test_one_click_in_both_settings(
    db_url: str, conn: Conn, serve: ServerFactory, setting: str
) -> None:
    lists = seed(conn)
    env = {} if setting == "suppress" else {"SENDDOCK_ONE_CLICK": "lists"}
    server: Server = serve(workers=False, env=env)
    cid = campaign(conn, "news")
    grace = subscriber_id(conn, "grace@example.com")
    url = f"/unsubscribe/{sign(key(conn, db_url), UNSUBSCRIBE, grace, cid)}"
    with server.client() as client:
        answer = client.post(
            url,
            content=b"List-Unsubscribe=One-Click",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert answer.status_code == 200 and "/preferences/" in answer.text
        assert client.post(url, content=b"List-Unsubscribe=One-Click").status_code == 200
    suppressed = conn.execute("SELECT reason, detail FROM suppressions").fetchall()
    news_total, _ = next_total(conn, "news", "news again")
    offers_total, offers = next_total(conn, "offers", "offers again")
    if setting == "suppress":  # as before: the campaign's lists left, the address suppressed
        assert statuses(conn, "grace@example.com") == {
            "news": "unsubscribed",
            "offers": "confirmed",
        }
        assert suppressed == [{"reason": "unsubscribe", "detail": "one-click"}]
        assert (news_total, offers_total) == (2, 2) and "grace@example.com" not in offers
        # Rejoining news on her page lifts the suppression and resumes news only: offers,
        # shown to her as left while she was suppressed, is left now.
        with server.client() as client:
            path = page_path(conn, db_url, "grace@example.com", cid)
            assert choose(client, path, "join", lists["news"]).status_code == 200
        assert conn.execute("SELECT count(*) AS n FROM suppressions").fetchone() == {"n": 0}
        assert statuses(conn, "grace@example.com") == {
            "news": "confirmed",
            "offers": "unsubscribed",
        }
        assert next_total(conn, "offers", "offers third")[0] == 2
    else:  # only the campaign's lists left: the other list still sends to her
        assert statuses(conn, "grace@example.com") == {
            "news": "unsubscribed",
            "offers": "confirmed",
        }
        assert suppressed == []
        assert events(conn) == [("leave", "news", "one-click", cid)]
        assert (news_total, offers_total) == (2, 3) and "grace@example.com" in offers
