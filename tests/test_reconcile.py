"""Issue 41: after a crash, ask the relay's log what became of the unconfirmed jobs.

The end-to-end test kills real workers mid-send to a real private Postfix (tests/
postfix_relay.py, which logs to its own file), then reconciles against that log and counts at
the server behind Postfix: every address exactly once. The parser's rules (a Postfix message
is accepted only once queued, a log proves absence only over the job's whole window) are
checked on log text of the shapes Postfix and Exim write.
"""

from __future__ import annotations

import functools
import gzip
import os
import random
import smtplib
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import postfix_relay
from crash_support import Fleet, campaign_done, worker_id
from senddock.campaigns import relay_log
from senddock.messages import wire_address
from senddock.testing import Catcher
from support import Conn, jobs, send_campaign, senddock, wait_until, worker_env
from web_support import free_ports

LIVENESS = {"SENDDOCK_LEASE_SECONDS": "6", "SENDDOCK_HEARTBEAT_INTERVAL": "0.5"}
SLACK = timedelta(seconds=2)
NOW = datetime(2026, 12, 7, 14, 0, 0, tzinfo=UTC)
ID = "<sd.4.17.0123456789abcdef0123456789abcdef@news.example.org>"

# What Postfix 3.7 wrote (tests/postfix_relay.py's maillog_file) for one accepted message and
# one whose client left after sending its header but before its final dot.
POSTFIX = """\
Dec 07 13:50:00 relay postfix/master[16490]: daemon started -- version 3.7.11
Dec 07 13:54:11 relay postfix/smtpd[16494]: 2E4F6210CD8: client=localhost[127.0.0.1]
Dec 07 13:54:11 relay postfix/cleanup[16497]: 2E4F6210CD8: message-id={ok}
Dec 07 13:54:11 relay postfix/qmgr[16492]: 2E4F6210CD8: from=<b@x.org>, nrcpt=1 (queue active)
Dec 07 13:54:12 relay postfix/smtpd[16494]: 2FAFC210CD9: client=localhost[127.0.0.1]
Dec 07 13:54:12 relay postfix/cleanup[16497]: 2FAFC210CD9: message-id={gone}
Dec 07 13:54:12 relay postfix/smtpd[16494]: lost connection after DATA (250 bytes) from localhost
Dec 07 13:58:00 relay postfix/smtpd[16494]: connect from localhost[127.0.0.1]
"""
GONE = "<sd.4.18.fedcba9876543210fedcba9876543210@news.example.org>"


def _log(text: str) -> relay_log.RelayLog:
    return relay_log.parse(text.splitlines(), NOW, UTC)


def _at(hms: str) -> datetime:
    return datetime.fromisoformat(f"2026-12-07T{hms}+00:00")


def _said(log: relay_log.RelayLog, mid: str, claim: str, dot: str) -> str:
    return relay_log.judge(log, "relay-log", mid, _at(claim), _at(dot), SLACK).said


def test_postfix_accepted_only_once_queued_and_absent_only_over_the_whole_window() -> None:
    """Postfix's cleanup logs the Message-ID before the final dot: a message whose client
    left is in the log too, with no queue entry (qmgr's `from=`). Accepted means queued; a
    job the log does not show is `not accepted` only when the log starts before its claim
    and goes on after its dot (each by the slack); else `cannot tell`. (Fails if the
    cleanup line alone counted: the gone message would be confirmed, its recipient dropped.)"""
    log = _log(POSTFIX.format(ok=ID, gone=GONE))
    assert _said(log, ID.upper(), "13:54:10", "13:54:11") == "accepted"
    assert _said(log, GONE, "13:54:10", "13:54:12") == "not accepted"
    # The log began after the claim (rotated since): cannot tell, however long it runs on.
    assert _said(log, GONE, "13:49:59", "13:54:12") == "cannot tell"
    # The log stops before the dot plus the slack: cannot tell.
    assert _said(log, GONE, "13:54:10", "13:57:59") == "cannot tell"
    rotated = relay_log.judge(log, "relay-log", GONE, _at("13:40:00"), _at("13:54:12"), SLACK)
    assert "rotated" in rotated.detail


def test_exim_arrival_lines_and_rotated_files_read_as_one_log(tmp_path: Path) -> None:
    """Exim's `<=` arrival line with `id=` is an acceptance; files given together (a rotated
    `.gz` and the current one) are one span, so a job claimed before the rotation is judged.
    (Fails if only the current file counted: its first line is after the claim.)"""
    old = tmp_path / "mainlog.1.gz"
    with gzip.open(old, "wt") as f:
        f.write("2026-12-07 13:00:00 Start queue run: pid=4\n")
        f.write(
            "2026-12-07 13:10:01 1vAbCd-000Ab1-Xy <= b@x.org H=localhost [127.0.0.1]"
            " P=esmtp S=1200 id=sd.4.17.0123456789abcdef0123456789abcdef@news.example.org\n"
        )
    new = tmp_path / "mainlog"
    new.write_text("2026-12-07 13:30:00 +0000 Start queue run: pid=9\n")
    os.utime(old, (time.time() - 100, time.time() - 100))
    both = relay_log.read([old, new], NOW, UTC)
    assert relay_log.judge(both, "l", ID, _at("13:10:00"), _at("13:10:01"), SLACK).said == (
        "accepted"
    )
    assert _said(both, GONE, "13:10:00", "13:10:01") == "not accepted"
    alone = relay_log.read([new], NOW, UTC)
    assert _said(alone, GONE, "13:10:00", "13:10:01") == "cannot tell"


def _sent(conn: Conn, bid: int) -> int:
    row = conn.execute(
        "SELECT count(*) AS n FROM broadcast_jobs WHERE broadcast_id = %s AND status = 'sent'",
        (bid,),
    ).fetchone()
    assert row is not None
    return int(row["n"])


def _reached(conn: Conn, bid: int, n: int) -> bool:
    return _sent(conn, bid) >= n


def _by_status(conn: Conn, bid: int) -> Counter[str]:
    return Counter(str(r["status"]) for r in jobs(conn, bid).values())


def _drained(relay: postfix_relay.Relay) -> bool:
    """Every message Postfix queued has left it (qmgr's `removed`)."""
    text = relay.log()
    return text.count(": removed") == text.count("(queue active)")


def _touch(relay: postfix_relay.Relay) -> None:
    """A session that sends nothing: Postfix logs a line now (the log goes on past a dot)."""
    with smtplib.SMTP("127.0.0.1", relay.port, timeout=10) as s:
        s.noop()


def test_reconcile_against_a_real_postfix_log_leaves_everyone_exactly_one_copy(
    conn: Conn, db_url: str, fleet: Fleet
) -> None:
    """SIGKILL workers mid-send to a real Postfix until some jobs end unconfirmed; then
    `campaign reconcile --log maillog` confirms exactly those Postfix queued and sends the
    rest again: the server behind Postfix gets every address exactly once (0 duplicates, 0
    undelivered), and each settled row says it was the relay's log. (Fails without
    reconcile: the unconfirmed wait for a person, or, resent all, arrive twice.)"""
    need = postfix_relay.available()
    if need:
        pytest.skip(need)
    # Odd addresses among them: a non-ASCII local part (SMTPUTF8 through Postfix) and an IDNA
    # domain, which the relay and its log carry in A-labels.
    emails = [
        f"zoë{i:04d}@bücher.example"
        if i % 100 == 7
        else f"user{i:04d}@bücher.example"
        if i % 100 == 37
        else f"user{i:04d}@example.com"
        for i in range(900)
    ]
    wire = {e.lower(): wire_address(e).lower() for e in emails}  # as the relay has them
    seed = int(os.environ.get("SENDDOCK_TEST_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    relay_port, bounce_port = free_ports(2)
    with (
        Catcher() as remote,
        postfix_relay.private_postfix(relay_port, remote.port, bounce_port) as relay,
    ):
        maillog = str(relay.root / "maillog")
        # No dot log: the dead are rescued as a peer on another host would, which cannot read
        # it, so some jobs are unconfirmed whose dot never went, and reconcile must tell them
        # from those Postfix queued (with the dot log, every unconfirmed one was queued:
        # tests/test_dot_log.py).
        env = worker_env(
            db_url,
            relay.url,
            SENDDOCK_RECONCILE_SLACK="2",
            SENDDOCK_DOT_LOG_DIR="off",
            **LIVENESS,
        )
        time.sleep(2.5)  # the log's first line is older than any claim by more than the slack
        cid, bid = send_campaign(conn, "news", emails)
        kills = 0
        for lo, hi in ((60, 160), (260, 360), (460, 560), (640, 720), (760, 820)):
            n = rng.randint(lo, hi)
            proc = fleet.start(env, f"killed-at-{n}")
            worker_id(conn, proc)
            assert wait_until(functools.partial(_reached, conn, bid, n), 60), _by_status(conn, bid)
            proc.kill()
            kills += 1
            if kills >= 3 and _by_status(conn, bid)["unconfirmed"] >= 2:
                break
        finisher = fleet.start(env, "finisher")
        settled = {"sent", "unconfirmed"}
        assert wait_until(lambda: set(_by_status(conn, bid)) <= settled, 120), _by_status(conn, bid)
        assert finisher.stop() == 0
        rows = jobs(conn, bid)
        unconfirmed = {e for e, r in rows.items() if r["status"] == "unconfirmed"}
        print(f"seed={seed} kills={kills} unconfirmed={len(unconfirmed)}")
        assert unconfirmed, "no job ended unconfirmed: nothing to reconcile (raise the kills)"
        assert wait_until(lambda: _drained(relay), 60)
        before = remote.count_by_rcpt()
        accepted = {e for e in unconfirmed if before[wire[e]]}
        time.sleep(2.5)
        _touch(relay)  # the log goes on past every dot by more than the slack
        assert wait_until(lambda: "disconnect from" in relay.log().splitlines()[-1], 10)

        out = senddock(env, "campaign", "reconcile", str(cid), "--log", maillog)
        assert out.returncode == 0, out.stderr
        rows = jobs(conn, bid)
        confirmed = {e for e in unconfirmed if rows[e]["status"] == "sent"}
        resent = unconfirmed - confirmed
        print(
            f"unconfirmed={len(unconfirmed)} postfix_accepted={len(accepted)}"
            f" confirmed={len(confirmed)} resent={len(resent)}"
        )
        assert confirmed == accepted  # exactly those Postfix queued
        for e in unconfirmed:
            assert rows[e]["settled_by"] == "relay-log" and rows[e]["settled_at"] is not None
        for e in resent:
            assert rows[e]["status"] in ("pending", "retry")
        assert f"confirmed {len(confirmed)} sent, queued {len(resent)} again, 0 left" in (
            out.stdout
        )

        last = fleet.start(env, "after-reconcile")
        worker_id(conn, last)  # started: a stop now is a stop, not a kill before its handler
        assert wait_until(lambda: campaign_done(conn, cid), 60), _by_status(conn, bid)
        assert last.stop() == 0
        assert wait_until(lambda: _drained(relay) and len(remote.count_by_rcpt()) >= 900, 60)
        got = remote.count_by_rcpt()
        assert remote.duplicates() == {}  # 0 duplicates
        assert all(got[wire[e.lower()]] == 1 for e in emails)  # 0 undelivered
        st = senddock(env, "campaign", "status", str(cid))
        assert "unconfirmed 0" in st.stdout
