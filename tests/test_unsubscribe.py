"""Unsubscribe and suppression: a real `senddock serve` process, a real HTTP client, a real
worker and SMTP server. One click suppresses at once, for every broadcast, idempotently."""

from __future__ import annotations

import email
import email.policy
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from senddock.campaigns import broadcast, create_campaign, status
from senddock.testing import Catcher
from support import (
    Conn,
    ThreadWorker,
    jobs,
    new_campaign,
    seed_list,
    senddock,
    unfinished,
    wait_until,
    worker_env,
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    base: str
    env: dict[str, str]


@pytest.fixture
def server(db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Server]:
    """`senddock serve` in its own process; SENDDOCK_PUBLIC_URL points at it for the worker."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("SENDDOCK_PUBLIC_URL", base)
    monkeypatch.delenv("SENDDOCK_SECRET_KEY", raising=False)
    env = worker_env(db_url, "smtp://127.0.0.1:1?tls=none", SENDDOCK_PUBLIC_URL=base)
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "senddock", "serve", "--port", str(port), "--no-workers"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        assert wait_until(lambda: _healthy(base) or proc.poll() is not None, timeout=30)
        assert proc.poll() is None, log.read_text()
        yield Server(base, env)
    finally:
        proc.terminate()
        proc.wait(15)


def _healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(base + "/healthz", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def http(method: str, url: str, body: bytes | None = None) -> tuple[int, str]:
    headers = {"Content-Type": "application/x-www-form-urlencoded"} if body is not None else {}
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def one_click_url(data: bytes) -> str:
    msg = email.message_from_bytes(data, policy=email.policy.default)
    assert msg["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    return str(msg["List-Unsubscribe"]).split(",")[0].strip().strip("<>")


def suppression_rows(conn: Conn) -> list[dict[str, object]]:
    return conn.execute(
        "SELECT lower(email) AS email, reason, source_broadcast_id, detail FROM suppressions"
    ).fetchall()


def membership(conn: Conn, address: str) -> str:
    row = conn.execute(
        "SELECT m.status FROM list_memberships m JOIN subscribers s ON s.id = m.subscriber_id"
        " WHERE s.email = %s",
        (address,),
    ).fetchone()
    assert row is not None
    return str(row["status"])


def send_and_drain(db_url: str, catcher: Catcher, conn: Conn, bid: int, n: int) -> None:
    with ThreadWorker(db_url, catcher.url):
        assert catcher.wait_for(n, timeout=60)
        assert wait_until(lambda: unfinished(conn, bid) == 0)


PEOPLE = ["ada@example.com", "grace@example.com", "bob@example.com"]


def test_one_click_unsubscribe_suppresses_at_once_and_later_campaigns_skip_the_address(
    db_url: str, conn: Conn, catcher: Catcher, server: Server
) -> None:
    seed_list(conn, "news", PEOPLE)
    first = new_campaign(conn, "news", "first")
    bid1, _, _ = broadcast(conn, first)
    send_and_drain(db_url, catcher, conn, bid1, 3)
    ada = next(r for r in catcher.received() if r.rcpt == "ada@example.com")
    url = one_click_url(ada.data)
    assert url.startswith(server.base + "/unsubscribe/")

    # A second campaign is already enqueued when Ada clicks; nobody sends it yet.
    second = new_campaign(conn, "news", "second")
    bid2, total2, _ = broadcast(conn, second)
    assert total2 == 3

    # What Gmail and Yahoo send on one click (RFC 8058).
    code, page = http("POST", url, b"List-Unsubscribe=One-Click")
    assert code == 200 and "unsubscribed" in page.lower()
    assert suppression_rows(conn) == [
        {
            "email": "ada@example.com",
            "reason": "unsubscribe",
            "source_broadcast_id": bid1,
            "detail": "one-click",
        }
    ]
    assert membership(conn, "ada@example.com") == "unsubscribed"
    assert membership(conn, "grace@example.com") == "confirmed"

    # Idempotent: a second click (or a provider retrying) changes nothing.
    assert http("POST", url, b"List-Unsubscribe=One-Click")[0] == 200
    assert len(suppression_rows(conn)) == 1

    # The enqueued broadcast never sends to her: her job fails as suppressed.
    catcher.clear()
    send_and_drain(db_url, catcher, conn, bid2, 2)
    assert sorted(r.rcpt for r in catcher.received()) == ["bob@example.com", "grace@example.com"]
    j = jobs(conn, bid2)["ada@example.com"]
    assert (j["status"], j["failure"], j["attempts"]) == ("failed", "suppressed", 0)

    # A later campaign does not even enqueue her.
    catcher.clear()
    third = new_campaign(conn, "news", "third")
    bid3, total3, _ = broadcast(conn, third)
    assert total3 == 2 and "ada@example.com" not in jobs(conn, bid3)
    send_and_drain(db_url, catcher, conn, bid3, 2)
    assert "ada@example.com" not in catcher.count_by_rcpt()
    assert status(conn, third).status == "sent"


def test_the_page_asks_before_unsubscribing_and_its_button_unsubscribes(
    db_url: str, conn: Conn, catcher: Catcher, server: Server
) -> None:
    seed_list(conn, "news", PEOPLE)
    bid, _, _ = broadcast(conn, new_campaign(conn, "news"))
    send_and_drain(db_url, catcher, conn, bid, 3)
    grace = next(r for r in catcher.received() if r.rcpt == "grace@example.com")
    url = one_click_url(grace.data)

    code, page = http("GET", url)
    assert code == 200
    assert "grace@example.com" in page and 'method="post"' in page and "<button" in page
    assert suppression_rows(conn) == []  # a GET (a link scanner, a preview) changes nothing

    # The page's button: a form POST with an empty body.
    code, page = http("POST", url, b"")
    assert code == 200
    rows = suppression_rows(conn)
    assert [(r["email"], r["reason"], r["detail"]) for r in rows] == [
        ("grace@example.com", "unsubscribe", "unsubscribe page")
    ]
    code, page = http("GET", url)
    assert code == 200 and "no more messages" in page


def test_a_two_list_campaigns_page_names_both_lists_and_leaves_both(
    db_url: str, conn: Conn, catcher: Catcher, server: Server
) -> None:
    # Failed before migration 0011: the page read campaigns.list_id, the first list only, so it
    # named "offers" alone, and the unsubscribe left Ada on "news".
    seed_list(conn, "offers", ["ada@example.com"])
    seed_list(conn, "news", ["ada@example.com", "grace@example.com"])
    cid = create_campaign(
        conn,
        name="both",
        list_name=["offers", "news"],
        subject="Hello",
        from_addr="News <news@example.org>",
        text_body="Hi {{ subscriber.name }}.\n",
    )
    bid, total, _ = broadcast(conn, cid)
    assert total == 2
    send_and_drain(db_url, catcher, conn, bid, 2)
    url = one_click_url(next(r for r in catcher.received() if r.rcpt == "ada@example.com").data)

    code, page = http("GET", url)
    assert code == 200, page
    assert "Unsubscribe <b>ada@example.com</b> from <b>news</b> and <b>offers</b>?" in page

    assert http("POST", url, b"")[0] == 200
    left = conn.execute(
        "SELECT l.name, m.status FROM list_memberships m JOIN lists l ON l.id = m.list_id"
        " JOIN subscribers s ON s.id = m.subscriber_id WHERE s.email = 'ada@example.com'"
        " ORDER BY l.name"
    ).fetchall()
    assert left == [
        {"name": "news", "status": "unsubscribed"},
        {"name": "offers", "status": "unsubscribed"},
    ]
    assert membership(conn, "grace@example.com") == "confirmed"


def test_a_tampered_or_forged_link_is_refused_and_changes_nothing(
    db_url: str, conn: Conn, catcher: Catcher, server: Server
) -> None:
    seed_list(conn, "news", PEOPLE)
    bid, _, _ = broadcast(conn, new_campaign(conn, "news"))
    send_and_drain(db_url, catcher, conn, bid, 3)
    url = one_click_url(next(r for r in catcher.received() if r.rcpt == "ada@example.com").data)
    prefix, token = url.rsplit("/", 1)
    sid, cid, mac = token.split(".")
    other = jobs(conn, bid)["bob@example.com"]["subscriber_id"]
    forged = [
        f"{prefix}/{other}.{cid}.{mac}",  # someone else's id with Ada's signature
        f"{prefix}/{sid}.{cid}.{mac[:-1]}{'A' if mac[-1] != 'A' else 'B'}",  # one char changed
        f"{prefix}/{sid}.{cid}",  # no signature
        f"{prefix}/{sid}.{cid}.AAAAAAAAAAAAAAAAAAAAAA",  # a guess
    ]
    for bad in forged:
        for method in ("GET", "POST"):
            code, page = http(
                method, bad, b"List-Unsubscribe=One-Click" if method == "POST" else None
            )
            assert code == 400, (method, bad, code)
            assert "not valid" in page
    assert suppression_rows(conn) == []
    assert {membership(conn, a) for a in PEOPLE} == {"confirmed"}


def test_suppressions_cli_adds_lists_removes_imports_and_exports(
    db_url: str, conn: Conn, catcher: Catcher, tmp_path: Path
) -> None:
    env = worker_env(db_url, catcher.url)

    def run(*args: str) -> str:
        proc = senddock(env, "suppressions", *args)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    seed_list(conn, "news", PEOPLE)
    assert "suppressed" in run("add", "Ada@Example.com")
    assert "already suppressed" in run("add", "ada@example.com", "--reason", "complaint")
    importing = tmp_path / "s.csv"
    importing.write_text(
        "email,reason\ngrace@example.com,complaint\nnot-an-address,\nzed@example.com,\n",
        encoding="utf-8",
    )
    proc = senddock(env, "suppressions", "import", str(importing))
    assert proc.returncode == 0, proc.stderr
    assert f"{importing}:3: rejected:" in proc.stderr
    assert "suppressed 2 addresses" in proc.stdout

    listed = run("list")
    assert [line.split()[:2] for line in listed.splitlines()] == [
        ["Ada@example.com", "manual"],
        ["grace@example.com", "complaint"],
        ["zed@example.com", "manual"],
    ]
    exported = run("export").splitlines()
    assert exported[0] == "email,reason,created_at,detail" and len(exported) == 4

    # A broadcast enqueues only bob; removing grace's suppression makes her sendable again.
    assert "removed" in run("remove", "GRACE@example.com")
    assert "was not suppressed" in run("remove", "grace@example.com")
    bid, total, _ = broadcast(conn, new_campaign(conn, "news"))
    assert sorted(jobs(conn, bid)) == ["bob@example.com", "grace@example.com"] and total == 2

    bad = senddock(env, "suppressions", "add", "nobody")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1
