"""Double opt-in through the real CLI, SMTP server and `senddock serve`: a subscriber added to
such a list gets a confirmation request, and no campaign until they confirm by its link."""

from __future__ import annotations

import email
import email.policy
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from senddock.audience.lists import ListError, configure
from senddock.campaigns import broadcast
from senddock.testing import Catcher
from support import Conn, jobs, new_campaign, seed_list, senddock, wait_until, worker_env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(method: str, url: str, body: bytes | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


@pytest.fixture
def env(db_url: str, catcher: Catcher, tmp_path: Path) -> Iterator[dict[str, str]]:
    """CLI environment whose SENDDOCK_PUBLIC_URL is a running `senddock serve`."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = worker_env(db_url, catcher.url, SENDDOCK_PUBLIC_URL=base)
    env.pop("SENDDOCK_SECRET_KEY", None)
    with (tmp_path / "serve.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "senddock", "serve", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def up() -> bool:
        try:
            return http("GET", base + "/healthz")[0] == 200
        except OSError:
            return proc.poll() is not None

    try:
        assert wait_until(up, timeout=30) and proc.poll() is None
        yield env
    finally:
        proc.terminate()
        proc.wait(15)


def status_of(conn: Conn, address: str, list_name: str) -> str:
    row = conn.execute(
        "SELECT m.status FROM list_memberships m JOIN subscribers s ON s.id = m.subscriber_id"
        " JOIN lists l ON l.id = m.list_id WHERE s.email = %s AND l.name = %s",
        (address, list_name),
    ).fetchone()
    assert row is not None
    return str(row["status"])


def test_a_double_opt_in_subscriber_gets_campaigns_only_after_confirming(
    env: dict[str, str], conn: Conn, catcher: Catcher
) -> None:
    seed_list(conn, "news", ["old@example.com"])
    made = senddock(
        env, "lists", "set", "news", "--double-opt-in", "--from", "News <n@example.org>"
    )
    assert made.returncode == 0, made.stderr
    added = senddock(
        env, "subscribers", "add", "ada@example.com", "--name", "Ada", "--list", "news"
    )
    assert added.returncode == 0, added.stderr
    assert "confirmation request for 'news' sent" in added.stderr
    assert status_of(conn, "ada@example.com", "news") == "unconfirmed"

    assert catcher.wait_for(1)
    request = email.message_from_bytes(catcher.received()[0].data, policy=email.policy.default)
    assert request["To"].addresses[0].addr_spec == "ada@example.com"
    assert request["From"].addresses[0].addr_spec == "n@example.org"
    assert "confirm" in str(request["Subject"]).lower()
    text = str(request.get_body(("plain",)).get_content())  # type: ignore[union-attr]
    found = re.search(r"(http://\S+/confirm/\S+)", text)
    assert found is not None, text
    url = found.group(1)

    # Unconfirmed: not enqueued.
    bid, _, _ = broadcast(conn, new_campaign(conn, "news", "before"))
    assert sorted(jobs(conn, bid)) == ["old@example.com"]

    # A tampered link is refused; a GET (a mail scanner) changes nothing.
    assert http("POST", url[:-1] + ("A" if url[-1] != "A" else "B"), b"")[0] == 400
    code, page = http("GET", url)
    assert code == 200 and "<button" in page and "ada@example.com" in page
    assert status_of(conn, "ada@example.com", "news") == "unconfirmed"

    code, page = http("POST", url, b"")
    assert code == 200 and "confirmed" in page
    assert status_of(conn, "ada@example.com", "news") == "confirmed"
    assert http("POST", url, b"")[0] == 200  # idempotent
    bid, _, _ = broadcast(conn, new_campaign(conn, "news", "after"))
    assert sorted(jobs(conn, bid)) == ["ada@example.com", "old@example.com"]

    # Following the old link after unsubscribing never re-subscribes.
    conn.execute("UPDATE list_memberships SET status = 'unsubscribed'")
    http("POST", url, b"")
    assert status_of(conn, "ada@example.com", "news") == "unsubscribed"

    shown = senddock(env, "lists", "show")
    assert "news: 0 confirmed, 0 unconfirmed, 2 unsubscribed  double opt-in" in shown.stdout


def test_a_double_opt_in_list_needs_a_sender_and_confirm_works_by_hand(
    env: dict[str, str], conn: Conn, catcher: Catcher
) -> None:
    with pytest.raises(ListError, match="needs --from"):
        configure(conn, "news", double_opt_in=True)
    configure(conn, "news", double_opt_in=True, from_addr="n@example.org")
    added = senddock(
        env, "subscribers", "add", "bob@example.com", "--list", "news", "--no-confirmation-email"
    )
    assert added.returncode == 0 and "confirmation" not in added.stderr
    assert catcher.received_count() == 0
    assert status_of(conn, "bob@example.com", "news") == "unconfirmed"
    done = senddock(env, "subscribers", "confirm", "bob@example.com", "--list", "news")
    assert done.returncode == 0 and "confirmed" in done.stdout
    assert status_of(conn, "bob@example.com", "news") == "confirmed"
