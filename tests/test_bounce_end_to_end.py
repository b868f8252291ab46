"""Issue 21 end to end: a real worker sends through a real Postfix to a remote MX that refuses
some recipients after Postfix's 250 and defers others; Postfix's own DSNs come back to each
job's VERP address on a real `senddock bounces serve`: exactly the refused recipients are
suppressed, and the next campaign skips them.
The same with the DSNs delivered (LMTP) into a Dovecot box read by `bounces poll --once`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from aiosmtpd.controller import Controller

import dovecot_box
import postfix_relay
from senddock.queue.counts import count
from support import Conn, jobs, send_campaign, senddock, start_worker, wait_until, worker_env
from test_bounce_cli import _listening
from test_bounce_parse import _RemoteMx
from test_bounce_poll import count as in_box
from web_support import free_port, free_ports


def need() -> None:
    why_not = postfix_relay.available()
    if why_not is None:
        return
    if os.environ.get("SENDDOCK_REQUIRE_MAILSERVERS"):
        pytest.fail(f"{why_not}, and SENDDOCK_REQUIRE_MAILSERVERS is set")
    pytest.skip(why_not)


def suppressed(conn: Conn) -> set[str]:
    return {str(r["email"]) for r in conn.execute("SELECT email FROM suppressions").fetchall()}


def test_the_relays_dsns_suppress_exactly_the_refused_and_the_next_campaign_skips_them(
    conn: Conn, db_url: str
) -> None:
    need()
    dead = [f"dead{i}@example.com" for i in range(3)]
    later = [f"later{i}@example.com" for i in range(2)]
    alive = [f"alive{i}@example.com" for i in range(5)]
    remote = Controller(_RemoteMx(), hostname="127.0.0.1", port=free_port())
    remote.start()
    relay_port, bounce_port = free_ports(2)  # distinct: neither is listening yet
    try:
        with postfix_relay.private_postfix(relay_port, remote.port, bounce_port) as relay:
            env = worker_env(
                db_url,
                f"smtp://127.0.0.1:{relay.port}?tls=none",
                SENDDOCK_BOUNCE_DOMAIN=postfix_relay.BOUNCE_DOMAIN,
            )
            serve = subprocess.Popen(
                [sys.executable, "-m", "senddock", "bounces", "serve", "--port", str(bounce_port)],
                env=env,
                stderr=subprocess.DEVNULL,
            )
            worker = start_worker(env, concurrency=2)
            try:
                assert wait_until(lambda: _listening(bounce_port), timeout=30)
                _, bid = send_campaign(conn, "news", dead + later + alive)
                assert wait_until(lambda: suppressed(conn) >= set(dead), timeout=90), relay.log()
                assert wait_until(lambda: count(conn, bid).bounced_later == len(dead), timeout=30)
                assert suppressed(conn) == set(dead)
                by = jobs(conn, bid)
                assert {a for a, j in by.items() if j["bounce_kind"] == "hard"} == set(dead)
                assert all(by[a]["status"] == "sent" for a in dead + later + alive)
                _, nxt = send_campaign(conn, "news", dead + later + alive, name="second")
                assert set(jobs(conn, nxt)) == set(later + alive)
            finally:
                worker.send_signal(signal.SIGTERM)
                serve.send_signal(signal.SIGTERM)
                worker.wait(timeout=60)
                serve.wait(timeout=30)
    finally:
        remote.stop()


def test_the_relays_dsns_through_a_dovecot_box_and_bounces_poll_suppress_exactly_the_refused(
    conn: Conn, db_url: str
) -> None:
    need()
    if (why_not := dovecot_box.available()) is not None:
        pytest.skip(why_not)
    dead = ["dead0@example.com", "dead1@bücher.example"]
    later = ["later0@example.com"]
    alive = ["alive0@example.com", "zoë@bücher.example"]
    remote = Controller(_RemoteMx(), hostname="127.0.0.1", port=free_port())
    remote.start()
    try:
        with (
            dovecot_box.private_dovecot(*free_ports(3)) as box,
            postfix_relay.private_postfix(free_port(), remote.port, box.lmtp, lmtp=True) as relay,
        ):
            mailbox = f"imap://{box.user}:{box.password}@127.0.0.1:{box.imap}?tls=none"
            env = worker_env(
                db_url,
                relay.url,
                SENDDOCK_BOUNCE_DOMAIN=postfix_relay.BOUNCE_DOMAIN,
                SENDDOCK_BOUNCE_MAILBOX=mailbox,
            )
            worker = start_worker(env, concurrency=2)
            try:
                _, bid = send_campaign(conn, "news", dead + later + alive)
                assert wait_until(lambda: in_box(box) == len(dead), timeout=90), relay.log()
            finally:
                worker.send_signal(signal.SIGTERM)
                worker.wait(timeout=60)
            polled = senddock(env, "bounces", "poll", "--once")
            assert polled.returncode == 0, polled.stderr
            assert f"{len(dead)} seen, {len(dead)} recorded" in polled.stderr
            assert in_box(box) == 0
    finally:
        remote.stop()
    assert suppressed(conn) == set(dead)
    assert count(conn, bid).bounced_later == len(dead)
    by = jobs(conn, bid)
    assert {a for a, j in by.items() if j["bounce_kind"] == "hard"} == set(dead)
    _, nxt = send_campaign(conn, "news", dead + later + alive, name="second")
    assert set(jobs(conn, nxt)) == set(later + alive)
