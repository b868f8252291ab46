"""Issue 41: after a SIGKILL, a job is `unconfirmed` only if its final dot may really have gone.

A job's mark (issue 23) commits a little before its final dot, so a kill in between used to
leave an `unconfirmed` job whose message never left: a decision for a person, and a duplicate
if they resend one that did go. Each worker process now notes, in its dot log on its own host
(delivery/dotlog.py), the job whose dot each sender is about to write; a rescuer on that host
reads it once the worker is dead and sends the others back to retry.

Real `senddock worker` processes, SIGKILLed; a real Postgres; the aiosmtpd catcher, whose
faults hold a sender before its dot (a slow RCPT) or after it (a slow reply). The end state is
asserted on the rows, the catcher and `campaign status`. The module's own guards (a live or
forked writer, another boot, a foreign or damaged file, left-overs) run on real files.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from crash_support import Fleet, campaign_done, fleet_for, worker_id
from senddock import campaigns
from senddock.campaigns import status
from senddock.delivery import dotlog
from senddock.messages import wire_address
from senddock.testing import Catcher, Fault
from support import Conn, jobs, send_campaign, senddock, wait_until, worker_env

LIVENESS = {"SENDDOCK_LEASE_SECONDS": "6", "SENDDOCK_HEARTBEAT_INTERVAL": "0.5"}
FIRST, SECOND, LAST = "ann@example.com", "bob@example.com", "dee@example.com"
# Held before its final dot: the catcher sits on its first RCPT TO. (The catcher sees its
# domain in A-labels.)
EARLY = "chloé@bücher.example"
EARLY_WIRE = wire_address(EARLY)
# Held after its final dot: the catcher keeps the message and sits on its reply.
LATE = "late-cy@example.com"


@pytest.fixture
def one_sender(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fleet]:
    """Worker processes with one sender each: which job is at its dot is known."""
    yield from fleet_for(request, tmp_path, 1)


def _held(address: str) -> Fault | None:
    if address == EARLY_WIRE:
        return Fault.stall_rcpt(seconds=20, attempts=1)
    if address == LATE:
        return Fault.stall(seconds=20, attempts=1, record_first=True)
    return None


def _marked(conn: Conn, job_id: int) -> bool:
    """The mark of the job's final dot is committed (on its row, or carried by the previous
    outcome of its session: 0025), and the job is still `sending`."""
    row = conn.execute(
        "SELECT j.status = 'sending' AND (j.dot_at IS NOT NULL OR EXISTS ("
        "  SELECT 1 FROM broadcast_jobs p WHERE p.next_dot = j.id AND p.owner = j.owner"
        "    AND p.updated_at > j.claimed_at)) AS marked"
        " FROM broadcast_jobs j WHERE j.id = %s",
        (job_id,),
    ).fetchone()
    return row is not None and bool(row["marked"])


def _kill_at(
    conn: Conn,
    fleet: Fleet,
    env: dict[str, str],
    ids: tuple[int, int],
    held: str,
    ready: Callable[[], bool],
) -> dict[str, dict[str, object]]:
    """Start a worker, SIGKILL it once `ready()`, pause the campaign and let a new worker on
    this host rescue at its start (or once the dead one's lease lapsed); the rows once job
    `held` is no longer `sending`."""
    cid, bid = ids
    proc = fleet.start(env, "killed")
    wid = worker_id(conn, proc)
    assert wait_until(ready, 30), f"never ready to kill:\n{proc.text()}"
    proc.kill()
    campaigns.pause(conn, cid)  # what the rescue did stays to be seen before anything is sent
    nxt = fleet.start(env, "rescuer")
    assert wait_until(lambda: jobs(conn, bid)[held]["status"] != "sending", 30), nxt.text()
    deaths = conn.execute("SELECT count(*) AS n FROM worker_deaths WHERE worker_id = %s", (wid,))
    row = deaths.fetchone()
    assert row is not None and row["n"] == 1
    return jobs(conn, bid)


@pytest.mark.parametrize("dot_log", ["", "off"])
def test_a_kill_before_the_final_dot_goes_back_to_retry_not_to_a_person(
    conn: Conn, db_url: str, one_sender: Fleet, tmp_path: Path, dot_log: str
) -> None:
    """The worker dies while its job's mark is committed and its dot is not yet written (the
    relay sits on RCPT): the dot log shows the dot never went, so the job goes back to retry,
    is sent once, and the campaign ends `sent` with nobody to decide about. With the dot log
    off (and on main before issue 41's dot log) the job is left `unconfirmed`."""
    folder = "off" if dot_log == "off" else str(tmp_path / "dots")
    with Catcher(fault_for=_held) as catcher:
        cid, bid = send_campaign(conn, "news", [FIRST, SECOND, EARLY, LAST])
        env = worker_env(db_url, catcher.url, SENDDOCK_DOT_LOG_DIR=folder, **LIVENESS)
        early_id = int(jobs(conn, bid)[EARLY]["id"])
        rows = _kill_at(conn, one_sender, env, (cid, bid), EARLY, lambda: _marked(conn, early_id))
        early = rows[EARLY]
        assert catcher.count_by_rcpt().get(EARLY_WIRE, 0) == 0  # its dot never went
        if dot_log == "off":
            assert (early["status"], early["attempts"]) == ("unconfirmed", 1)
            assert status(conn, cid).counts.unconfirmed == 1
            return
        assert (early["status"], early["attempts"], early["deaths"]) == ("retry", 0, 1)
        assert "its dot log shows it never did" in str(early["last_reply"])
        # The dead one's log is read and gone; the rescuer's own is left.
        assert len(list((tmp_path / "dots").glob("*.dots"))) == 1
        campaigns.resume(conn, cid)
        assert wait_until(lambda: campaign_done(conn, cid), 30), jobs(conn, bid)
        got = catcher.count_by_rcpt()
        assert got == {FIRST: 1, SECOND: 1, EARLY_WIRE: 1, LAST: 1}
        st = status(conn, cid)
        assert (st.status, st.counts.sent, st.counts.unconfirmed, st.counts.total) == (
            "sent",
            4,
            0,
            4,
        )
        out = senddock(env, "campaign", "status", str(cid), "--json")
        assert out.returncode == 0, out.stderr
        js = json.loads(out.stdout)
        assert (js["status"], js["sent"], js["unconfirmed"]) == ("sent", 4, 0), js


def test_a_kill_after_the_final_dot_still_leaves_it_unconfirmed(
    conn: Conn, db_url: str, one_sender: Fleet, tmp_path: Path
) -> None:
    """The worker dies after its job's dot went (the relay kept the message and sits on its
    reply): the dot log names that job, so it stays `unconfirmed`, never resent on its own.
    (Fails if the sender did not note its dots: the job would be sent twice.)"""
    with Catcher(fault_for=_held) as catcher:
        cid, bid = send_campaign(conn, "news", [FIRST, LATE, LAST])
        env = worker_env(db_url, catcher.url, SENDDOCK_DOT_LOG_DIR=str(tmp_path), **LIVENESS)

        def kept() -> bool:  # the relay has the message; its reply is what waits
            return catcher.count_by_rcpt()[LATE] == 1

        rows = _kill_at(conn, one_sender, env, (cid, bid), LATE, kept)
        assert (rows[LATE]["status"], rows[LATE]["attempts"]) == ("unconfirmed", 1)
        campaigns.resume(conn, cid)
        assert wait_until(lambda: jobs(conn, bid)[LAST]["status"] == "sent", 30)
        time.sleep(1.0)  # a resend on its own would have gone by now
        assert catcher.count_by_rcpt() == {FIRST: 1, LATE: 1, LAST: 1}
        st = status(conn, cid)
        assert (st.status, st.counts.sent, st.counts.unconfirmed) == ("sending", 2, 1)
        assert campaigns.confirm(conn, cid) == 1  # the relay's log shows it went
        assert wait_until(lambda: campaign_done(conn, cid), 30)
        assert catcher.count_by_rcpt() == {FIRST: 1, LATE: 1, LAST: 1}


def test_a_worker_of_another_host_is_rescued_unconfirmed(
    conn: Conn, db_url: str, one_sender: Fleet, tmp_path: Path
) -> None:
    """A rescuer cannot read the dot log of a worker on another host: the job whose mark was
    committed stays `unconfirmed`, as before (its lease lapses; nothing is guessed)."""
    with Catcher(fault_for=_held) as catcher:
        cid, bid = send_campaign(conn, "news", [FIRST, SECOND, EARLY, LAST])
        env = worker_env(db_url, catcher.url, SENDDOCK_DOT_LOG_DIR=str(tmp_path), **LIVENESS)
        early_id = int(jobs(conn, bid)[EARLY]["id"])

        def elsewhere_and_marked() -> bool:
            conn.execute("UPDATE workers SET host = 'elsewhere.example'")
            return _marked(conn, early_id)

        rows = _kill_at(conn, one_sender, env, (cid, bid), EARLY, elsewhere_and_marked)
        assert (rows[EARLY]["status"], rows[EARLY]["attempts"]) == ("unconfirmed", 1)
        assert catcher.count_by_rcpt().get(EARLY_WIRE, 0) == 0


# -- the dot log's own guards, on real files -------------------------------------------------


def test_a_live_writer_s_log_is_never_read_and_a_dead_one_s_is(tmp_path: Path) -> None:
    log = dotlog.DotLog.create(tmp_path, 3)
    assert log is not None
    log.note(0, 41, 1)
    log.note(2, 7, 3)
    log.note(0, 42, 1)  # the sender's next dot: its last one's outcome was committed first
    boot, pid = dotlog.boot_id(), os.getpid()
    assert dotlog.read_dead(str(log.path), boot, pid) is None  # its lock is held: alive
    log.close(remove=False)
    read = dotlog.read_dead(str(log.path), boot, pid)
    assert read is not None and read.dots == {(42, 1), (7, 3)}
    assert dotlog.read_dead(str(log.path), boot, pid + 1) is None  # another process's row
    assert dotlog.read_dead(str(log.path), "another-boot", pid) is None


def test_a_child_that_inherited_the_log_keeps_it_unread(tmp_path: Path) -> None:
    """A process the writer forked holds its lock: the writer may not be the last one alive."""
    log = dotlog.DotLog.create(tmp_path, 1)
    assert log is not None
    log.note(0, 5, 1)
    child = os.fork()
    if child == 0:  # pragma: no cover (the child only waits to be killed)
        time.sleep(60)
        os._exit(0)
    try:
        log.close(remove=False)
        assert dotlog.read_dead(str(log.path), dotlog.boot_id(), os.getpid()) is None
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    read = dotlog.read_dead(str(log.path), dotlog.boot_id(), os.getpid())
    assert read is not None and read.dots == {(5, 1)}


def test_a_damaged_or_foreign_file_is_not_trusted(tmp_path: Path) -> None:
    log = dotlog.DotLog.create(tmp_path, 2)
    assert log is not None
    log.note(1, 9, 1)
    log.close(remove=False)
    boot, pid, path = dotlog.boot_id(), os.getpid(), log.path
    data = path.read_bytes()
    path.write_bytes(data[:-1])  # cut short
    assert dotlog.read_dead(str(path), boot, pid) is None
    path.write_bytes(b"X" + data[1:])  # not ours
    assert dotlog.read_dead(str(path), boot, pid) is None
    path.write_bytes(data)
    link = tmp_path / "link.dots"
    link.symlink_to(path)
    assert dotlog.read_dead(str(link), boot, pid) is None
    assert dotlog.read_dead(str(tmp_path / "missing.dots"), boot, pid) is None
    assert dotlog.read_dead(str(path.with_suffix(".txt")), boot, pid) is None
    assert dotlog.read_dead(str(path), boot, pid) is not None


def test_no_log_where_it_is_off_or_the_folder_is_not_private(tmp_path: Path) -> None:
    assert dotlog.directory("off") is None and dotlog.directory(" OFF ") is None
    assert dotlog.directory("") == dotlog.default_directory()
    assert dotlog.DotLog.create(None, 5) is None
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert dotlog.DotLog.create(shared, 5) is None
    made = tmp_path / "new" / "dots"
    log = dotlog.DotLog.create(made, 5)
    assert log is not None and made.stat().st_mode & 0o777 == 0o700
    log.close(remove=True)
    assert not log.path.exists()


def test_left_over_logs_are_removed_and_held_or_recent_ones_kept(tmp_path: Path) -> None:
    live = dotlog.DotLog.create(tmp_path, 1)
    recent = dotlog.DotLog.create(tmp_path, 1)
    old = dotlog.DotLog.create(tmp_path, 1)
    assert live is not None and recent is not None and old is not None
    recent.close(remove=False)
    old.close(remove=False)
    then = time.time() - dotlog.STALE_SECONDS - 60
    os.utime(old.path, (then, then))
    old_live = tmp_path / "x.dots"
    os.link(live.path, old_live)  # the same file, held by its live writer
    os.utime(old_live, (then, then))
    assert dotlog.remove_stale(tmp_path, keep=None) == 1
    assert not old.path.exists()
    assert recent.path.exists() and live.path.exists() and old_live.exists()
    live.close(remove=True)
