"""Several SMTP servers: weights, and a server that cannot be reached (issue 6, target 6).

What each server received is counted at the server; what each job was charged, in its row.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crash_support import addresses, campaign_done
from senddock.config import SmtpTarget
from senddock.delivery.servers import ServerPool
from senddock.testing import Catcher
from senddock.testing.workers import Process
from support import Conn, jobs, send_campaign, senddock, start_worker, wait_until, worker_env


@pytest.fixture
def other() -> Iterator[Catcher]:
    """A second SMTP server."""
    with Catcher() as c:
        yield c


def _stop(proc: Process) -> None:
    proc.terminate()
    try:
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def _all_sent_once(conn: Conn, bid: int) -> None:
    rows = jobs(conn, bid)
    assert {r["status"] for r in rows.values()} == {"sent"}
    attempts = {r["attempts"] for r in rows.values()}
    assert attempts == {1}, "a job was charged an attempt for a server it never reached"


def test_weights_share_the_messages_among_servers(
    conn: Conn, db_url: str, catcher: Catcher, other: Catcher, tmp_path: Path
) -> None:
    emails = addresses(2000)
    cid, bid = send_campaign(conn, "news", emails)
    url = f"{catcher.url}&weight=3 , {other.url}&weight=1"
    worker = start_worker(worker_env(db_url, url), log=tmp_path / "w.log")
    try:
        assert wait_until(lambda: campaign_done(conn, cid), 120)
    finally:
        _stop(worker)
    heavy, light = catcher.received_count(), other.received_count()
    assert heavy + light == len(emails)
    assert sorted(catcher.count_by_rcpt() + other.count_by_rcpt()) == sorted(emails)
    print(f"weights 3:1 -> {heavy}:{light} ({heavy / len(emails):.1%} to the heavier)")
    assert abs(heavy / len(emails) - 0.75) <= 0.05, (heavy, light)
    _all_sent_once(conn, bid)


def test_a_server_down_from_the_start_is_skipped_and_its_jobs_go_to_the_other(
    conn: Conn, db_url: str, catcher: Catcher, other: Catcher, tmp_path: Path
) -> None:
    catcher.set_down(True)
    emails = addresses(500)
    cid, bid = send_campaign(conn, "news", emails)
    url = f"{catcher.url} {other.url}"
    log = tmp_path / "w.log"
    worker = start_worker(worker_env(db_url, url), log=log)
    try:
        assert wait_until(lambda: campaign_done(conn, cid), 60), log.read_text()
        assert other.delivered_once(emails)
        assert catcher.received_count() == 0
        _all_sent_once(conn, bid)

        # It comes back: once its backoff has passed, it is tried again and gets mail.
        catcher.set_down(False)
        back = time.monotonic()
        more: list[str] = []
        for round_ in range(60):
            batch = addresses(100, prefix=f"later{round_}-")
            more += batch
            send_campaign(conn, f"later{round_}", batch, name=f"later{round_}")
            if wait_until(lambda: catcher.received_count() > 0, 2.0):
                break
        assert catcher.received_count() > 0, "the server that came back got nothing"
        print(f"back up: mail again after {time.monotonic() - back:.1f} s")
        assert wait_until(
            lambda: catcher.received_count() + other.received_count() >= 500 + len(more), 60
        )
    finally:
        _stop(worker)
    assert sorted(catcher.count_by_rcpt() + other.count_by_rcpt()) == sorted(emails + more)
    assert "via another" in log.read_text()


def test_with_every_server_down_a_job_takes_the_transient_failure_as_today(
    conn: Conn, db_url: str, catcher: Catcher, other: Catcher, tmp_path: Path
) -> None:
    catcher.set_down(True)
    other.set_down(True)
    emails = addresses(20)
    cid, bid = send_campaign(conn, "news", emails)
    worker = start_worker(worker_env(db_url, f"{catcher.url},{other.url}"), log=tmp_path / "w.log")
    try:
        failed = "SELECT count(*) AS n FROM broadcast_jobs WHERE last_stage = 'connect'"
        assert wait_until(lambda: conn.execute(failed).fetchone()["n"] > 0, 30)  # type: ignore[index]
        other.set_down(False)
        assert wait_until(lambda: campaign_done(conn, cid), 60)
    finally:
        _stop(worker)
    assert other.delivered_once(emails)
    rows = jobs(conn, bid).values()
    assert max(r["attempts"] for r in rows) >= 2  # the failure was counted, as with one server


def test_several_servers_parse_from_one_setting() -> None:
    targets = SmtpTarget.parse_all(
        "smtp://a.test:2525?tls=none&weight=3&per_second=20&per_hour=50000,"
        "  smtps://u:p%2Cw@b.test?name=backup&per_minute=600\n smtp://c.test"
    )
    a, b, c = targets
    assert (a.name, a.weight, a.per_second, a.per_minute, a.per_hour) == (
        "a.test:2525",
        3,
        20,
        None,
        50000,
    )
    assert (b.name, b.tls, b.port, b.password, b.weight, b.per_minute) == (
        "backup",
        "tls",
        465,
        "p,w",
        1,
        600,
    )
    assert (c.name, c.limited) == ("c.test:25", False)
    assert (
        SmtpTarget.parse("smtp://one.test:25?tls=none")
        == SmtpTarget.parse_all("smtp://one.test:25?tls=none")[0]
    )


@pytest.mark.parametrize(
    "smtp_url",
    [
        "smtp://a.test?weight=0",
        "smtp://a.test?per_second=fast",
        "smtp://a.test?per_minute=-5",
        "smtp://a.test?per_secnd=5",
        "smtp://a.test smtp://a.test",
        "smtp://a.test?name=x smtp://b.test?name=x",
        "smtp://a.test,http://b.test",
        " , ",
    ],
)
def test_a_bad_server_list_is_refused_in_one_line(smtp_url: str, db_url: str) -> None:
    proc = senddock(worker_env(db_url, smtp_url), "worker", timeout=30)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad configuration" in lines[0], proc.stderr


def test_a_down_server_is_tried_again_by_one_sender_after_a_doubling_backoff() -> None:
    a, b = SmtpTarget.parse_all("smtp://a.test?weight=5 smtp://b.test")
    pool = ServerPool([a, b])
    pool.failed(a.name)
    assert {pool.pick().name for _ in range(20)} == {b.name}  # skipped while down (1 s)
    pool.failed(a.name)  # a sender that picked it before it went down: counted once
    time.sleep(1.05)
    picks = [pool.pick().name for _ in range(20)]
    assert picks.count(a.name) == 1, "one sender at a time tries it again"
    pool.failed(a.name)  # still down: now for 2 s
    time.sleep(1.05)
    assert a.name not in {pool.pick().name for _ in range(20)}
    time.sleep(1.0)
    assert pool.pick().name == a.name
    pool.succeeded(a.name)
    picks = [pool.pick().name for _ in range(60)]
    assert picks.count(a.name) == 50  # healthy again: its weight, exactly
    pool.failed(a.name)
    pool.failed(b.name)
    assert not pool.any_usable()
    assert pool.pick().name == a.name  # none usable: the one back soonest
