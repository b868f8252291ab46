"""Public sign-up through a real `senddock serve`: POST /subscribe from a list's form, the
confirmation mail at a real SMTP server, the per-IP limit shared by two processes, the
honeypot, and one answer whatever the address's past."""

from __future__ import annotations

import email
import email.policy
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from senddock.audience import signup, subscribers, suppressions
from senddock.audience.lists import configure
from senddock.campaigns.compose import link_key
from senddock.config import load
from senddock.messages import wire_address
from senddock.testing import Catcher
from senddock.web import auth
from support import Conn, senddock, wait_until, worker_env
from web_support import Server, start_server

NEWS_FROM = "News <news@example.org>"
ZOE = "zoë@bücher.example"
AGENT = "Mozilla/5.0 (sign-up test)"


@pytest.fixture(scope="module")
def mail() -> Iterator[Catcher]:
    with Catcher() as c:
        yield c


@pytest.fixture(scope="module")
def two(pg_url: str, mail: Catcher) -> Iterator[tuple[Server, Server]]:
    """Two `senddock serve` processes on one database, kept for the module (each test empties
    the tables first, through `db_url`)."""
    with (
        start_server(pg_url, mail.url, workers=False) as first,
        start_server(pg_url, mail.url, workers=False) as second,
    ):
        yield first, second
        print(first.text(), second.text())


@pytest.fixture
def site(db_url: str, two: tuple[Server, Server], mail: Catcher) -> tuple[Server, Server]:
    mail.reset()
    return two


@pytest.fixture
def env(db_url: str, mail: Catcher) -> dict[str, str]:
    return worker_env(db_url, mail.url)


def cli_public_list(env: dict[str, str], name: str, *options: str) -> str:
    """Make list `name` public (with `options`) by the CLI; the token its printed form carries."""
    made = senddock(env, "lists", "set", name, "--public", *options)
    assert made.returncode == 0, made.stderr
    form = senddock(env, "lists", "form", name)
    assert form.returncode == 0, form.stderr
    assert 'action="http://127.0.0.1:8025/subscribe"' in form.stdout
    assert 'name="website"' in form.stdout and 'name="email"' in form.stdout
    found = re.search(r'name="list" value="([^"]+)"', form.stdout)
    assert found is not None, form.stdout
    return found.group(1)


def public_list(conn: Conn, name: str, double_opt_in: bool = True) -> str:
    """The same through the module the CLI calls (a CLI run costs seconds on a busy machine)."""
    from_addr = NEWS_FROM if double_opt_in else None
    list_id = configure(conn, name, double_opt_in=double_opt_in, from_addr=from_addr)
    signup.set_public(conn, list_id, True)
    return signup.form_token(link_key(conn, load()), list_id)


def post(url: str, fields: dict[str, str], as_json: bool = False) -> httpx.Response:
    headers = {"User-Agent": AGENT}
    if as_json:
        return httpx.post(url + "/subscribe", json=fields, headers=headers, timeout=30)
    return httpx.post(url + "/subscribe", data=fields, headers=headers, timeout=30)


def membership(conn: Conn, address: str, list_name: str = "news") -> str | None:
    row = conn.execute(
        "SELECT m.status FROM list_memberships m JOIN subscribers s ON s.id = m.subscriber_id"
        " JOIN lists l ON l.id = m.list_id WHERE lower(s.email) = lower(%s) AND l.name = %s",
        (address, list_name),
    ).fetchone()
    return None if row is None else str(row["status"])


def joins(conn: Conn, address: str, status: str, list_name: str = "news") -> bool:
    """Whether the membership reaches `status`: a sign-up is written after its answer."""
    return wait_until(lambda: membership(conn, address, list_name) == status, timeout=15)


def consents(conn: Conn) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT s.email, l.name AS list_name, c.ip, c.user_agent, c.double_opt_in,"
        " c.requested_at, c.confirmed_at FROM signup_consents c"
        " JOIN subscribers s ON s.id = c.subscriber_id JOIN lists l ON l.id = c.list_id"
        " ORDER BY c.id"
    ).fetchall()


def test_a_sign_up_mails_a_link_and_only_following_it_activates_the_membership(
    env: dict[str, str], conn: Conn, mail: Catcher, site: tuple[Server, Server]
) -> None:
    token = cli_public_list(env, "news", "--double-opt-in", "--from", NEWS_FROM)
    server = site[0]

    answer = post(server.url, {"list": token, "email": ZOE, "name": "Zoë Brontë"})
    assert answer.status_code == 200, answer.text
    assert "confirm" in answer.text.lower() and "news" in answer.text
    assert joins(conn, ZOE, "unconfirmed")
    [proof] = consents(conn)
    assert proof["email"] == ZOE and proof["list_name"] == "news"
    assert proof["ip"] == "127.0.0.1" and proof["user_agent"] == AGENT
    assert proof["double_opt_in"] and proof["confirmed_at"] is None

    assert mail.wait_for(1)
    got = mail.received()[0]
    assert got.rcpt == wire_address(ZOE)  # zoë@xn--bcher-kva.example, over SMTPUTF8
    request = email.message_from_bytes(got.data, policy=email.policy.default)
    assert request["From"].addresses[0].addr_spec == "news@example.org"
    text = str(request.get_body(("plain",)).get_content())  # type: ignore[union-attr]
    found = re.search(r"https?://\S+(/confirm/\S+)", text)
    assert found is not None, text
    link = server.url + found.group(1)

    with httpx.Client(timeout=30) as web:
        assert web.get(link).status_code == 200  # a mail scanner's GET changes nothing
        assert membership(conn, ZOE) == "unconfirmed"
        done = web.post(link)
    assert done.status_code == 200 and "confirmed" in done.text
    assert membership(conn, ZOE) == "confirmed"
    [proof] = consents(conn)
    assert proof["confirmed_at"] is not None and proof["confirmed_at"] >= proof["requested_at"]

    # JSON takes the same fields; a single opt-in public list is joined at once.
    other = public_list(conn, "digest", double_opt_in=False)
    answer = post(server.url, {"list": other, "email": "ada@example.com"}, as_json=True)
    assert answer.status_code == 200 and answer.json()["status"] == "received"
    assert joins(conn, "ada@example.com", "confirmed", "digest")
    assert mail.received_count() == 1  # no request on a single opt-in list


def test_bad_input_is_refused_in_one_line_and_private_lists_take_no_sign_up(
    env: dict[str, str], conn: Conn, mail: Catcher, site: tuple[Server, Server]
) -> None:
    token = public_list(conn, "news")
    server = site[1]

    bad = post(server.url, {"list": token, "email": "not an address"}, as_json=True)
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "email"
    assert "\n" not in bad.json()["error"]["message"]
    forged_token = token[:-1] + ("x" if token[-1] != "x" else "y")
    forged = post(server.url, {"list": forged_token, "email": "ada@example.com"})
    assert forged.status_code == 404
    huge = post(server.url, {"list": token, "email": "a@example.com", "name": "x" * 70_000})
    assert huge.status_code == 413

    closed = senddock(env, "lists", "set", "news", "--private")
    assert closed.returncode == 0, closed.stderr
    assert post(server.url, {"list": token, "email": "ada@example.com"}).status_code == 404
    assert conn.execute("SELECT count(*) AS n FROM subscribers").fetchone() == {"n": 0}
    assert mail.received_count() == 0


def test_the_answer_is_the_same_for_new_existing_unsubscribed_and_suppressed_addresses(
    conn: Conn, mail: Catcher, site: tuple[Server, Server]
) -> None:
    token = public_list(conn, "news")
    for address in ("member@example.com", "left@example.com"):
        subscribers.add(conn, address, "Kept", lists=("news",))
    conn.execute(
        "UPDATE list_memberships m SET status = CASE WHEN s.email = 'member@example.com'"
        " THEN 'confirmed' ELSE 'unsubscribed' END FROM subscribers s WHERE s.id = m.subscriber_id"
    )
    suppressions.add(conn, "blocked@example.com")
    server = site[0]

    for as_json in (False, True):
        answers = {
            address: post(server.url, {"list": token, "email": address, "name": "Mallory"}, as_json)
            for address in (
                f"new{int(as_json)}@example.com",
                "member@example.com",
                "left@example.com",
                "blocked@example.com",
            )
        }
        shapes = {(r.status_code, r.text) for r in answers.values()}
        assert len(shapes) == 1, shapes
        assert next(iter(shapes))[0] == 200

    # What each did, unseen by the caller: the member and the names stay as they were, the
    # suppressed address is neither stored nor mailed, the one who left must confirm again.
    # The last sign-up's mail, so the ones before it have been applied.
    assert post(server.url, {"list": token, "email": "last@example.com"}).status_code == 200
    assert mail.wait_for(5)  # new0, new1, twice the one who left (still unconfirmed), last
    mailed = sorted(r.rcpt for r in mail.received())
    assert joins(conn, "left@example.com", "unconfirmed")
    assert membership(conn, "member@example.com") == "confirmed"
    assert membership(conn, "blocked@example.com") is None
    names = conn.execute(
        "SELECT name FROM subscribers WHERE email IN ('member@example.com', 'left@example.com')"
    ).fetchall()
    assert [r["name"] for r in names] == ["Kept", "Kept"]
    assert mailed == ["last@example.com"] + ["left@example.com"] * 2 + [
        "new0@example.com",
        "new1@example.com",
    ]


def test_a_filled_honeypot_gets_the_same_answer_and_nothing_is_stored(
    conn: Conn, mail: Catcher, site: tuple[Server, Server]
) -> None:
    token = public_list(conn, "news")
    server = site[0]

    person = post(server.url, {"list": token, "email": "ada@example.com", "website": ""})
    bot = post(server.url, {"list": token, "email": "bot@example.com", "website": "http://x"})
    assert (bot.status_code, bot.text) == (person.status_code, person.text)
    assert mail.wait_for(1)
    assert joins(conn, "ada@example.com", "unconfirmed")
    emails = {r["email"] for r in conn.execute("SELECT email FROM subscribers").fetchall()}
    assert emails == {"ada@example.com"}
    assert [c["email"] for c in consents(conn)] == ["ada@example.com"]
    assert mail.wait_for(1)
    assert {r.rcpt for r in mail.received()} == {"ada@example.com"}


def test_the_per_ip_limit_holds_across_two_serve_processes(
    conn: Conn, site: tuple[Server, Server]
) -> None:
    token = public_list(conn, "digest", double_opt_in=False)
    first, second = site

    codes = [
        post(server.url, {"list": token, "email": f"reader{i}.{n}@example.com"}).status_code
        for i in range(5)
        for n, server in enumerate((first, second))
    ]
    assert codes == [200] * 10  # the limit: 10 a window from one client, both processes
    for server in (second, first):
        refused = post(server.url, {"list": token, "email": "late@example.com"})
        assert refused.status_code == 429 and refused.headers["Retry-After"] == "300"
        as_json = post(server.url, {"list": token, "email": "late@example.com"}, as_json=True)
        assert as_json.status_code == 429 and "Too many" in as_json.json()["error"]["message"]
    assert membership(conn, "late@example.com", "digest") is None

    def joined() -> int:
        row = conn.execute("SELECT count(*) AS n FROM list_memberships").fetchone()
        return int(row["n"]) if row else 0

    assert wait_until(lambda: joined() == 10, timeout=15)


def test_the_api_opens_a_list_and_hands_out_its_form(
    conn: Conn, mail: Catcher, site: tuple[Server, Server]
) -> None:
    list_id = configure(conn, "news")
    with site[0].client(auth.create_token(conn, "signup")) as api:
        form = api.get(f"/api/v1/lists/{list_id}/form").json()
        assert form["public"] is False
        assert (
            post(site[0].url, {"list": form["token"], "email": "a@example.com"}).status_code == 404
        )
        opened = api.patch(f"/api/v1/lists/{list_id}", json={"public": True})
        assert opened.status_code == 200 and opened.json()["public"] is True
        again = api.get(f"/api/v1/lists/{list_id}/form").json()
    assert (
        again["token"] in again["html"]
        and 'action="http://127.0.0.1:8025/subscribe"' in again["html"]
    )
    answer = post(site[1].url, {"list": again["token"], "email": "a@example.com"}, as_json=True)
    assert answer.status_code == 200
    assert joins(conn, "a@example.com", "confirmed")
