"""`senddock worker --processes N`: N real worker processes under one parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from crash_support import addresses, campaign_done
from senddock.cli import DEFAULT_CONCURRENCY, MAX_AUTO_PROCESSES
from senddock.testing import Catcher
from support import Conn, send_campaign, unfinished, wait_until, worker_env

CONCURRENCY = 3
# Native libraries that every worker loads and a supervisor needs none of (Pydantic, psycopg,
# the event loop, Jinja2): /proc/PID/maps names them once they are imported.
WORKER_LIBRARIES = ("_pydantic_core", "psycopg_binary", "uvloop", "markupsafe")
# What neither the supervisor nor its workers load: the command line. Pure Python, so maps
# cannot tell: PYTHONPROFILEIMPORTTIME makes each interpreter list its imports on stderr, after
# a header it writes once, when it starts.
COMMAND_LINE = ("click", "senddock.cli")
IMPORT_TIMES = "import time: self [us] | cumulative | imported package"


def _start(env: dict[str, str], log: Path, processes: int | None) -> subprocess.Popen[bytes]:
    """`senddock worker --processes N`, or with no flags at all when `processes` is None."""
    argv = [sys.executable, "-m", "senddock", "-v", "worker"]
    if processes is not None:
        argv += ["--processes", str(processes), "--concurrency", str(CONCURRENCY)]
    with open(log, "ab") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)


def _children(conn: Conn) -> list[int]:
    rows = conn.execute("SELECT pid FROM workers ORDER BY id").fetchall()
    return [int(r["pid"]) for r in rows]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0) until reaped by init; it runs nothing.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] == "Z"


def test_killing_the_parent_kills_every_worker_process_and_loses_nobody(
    conn: Conn, db_url: str, catcher: Catcher, tmp_path: Path
) -> None:
    emails = addresses(3000)
    cid, bid = send_campaign(conn, "news", emails)
    # The resend setting (issue 23): every job ends sent, at most one duplicate a session; the
    # default (unconfirmed, never resent) is tests/test_unconfirmed.py's.
    env = worker_env(db_url, catcher.url, SENDDOCK_UNCONFIRMED="resend")
    parent = _start(env, tmp_path / "parent.log", 2)
    try:
        assert wait_until(lambda: len(_children(conn)) == 2, 30), tmp_path / "parent.log"
        children = _children(conn)
        assert parent.pid not in children  # the senders are the children
        assert wait_until(lambda: catcher.received_count() >= 300, 60)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        # The kernel takes the children down with the parent: the same crash as one worker.
        assert wait_until(lambda: all(_gone(p) for p in children), 10)
    finally:
        if parent.poll() is None:
            parent.kill()
    assert unfinished(conn, bid) > 0, "the kill came too late to test anything"
    again = _start(env, tmp_path / "again.log", 2)
    try:
        assert wait_until(lambda: campaign_done(conn, cid), 120)
        again.send_signal(signal.SIGTERM)
        assert again.wait(30) == 0
    finally:
        if again.poll() is None:
            again.kill()
    counts = catcher.count_by_rcpt()
    assert sorted(counts) == sorted(emails), "somebody was dropped"
    duplicates = sum(n - 1 for n in counts.values())
    # At most one accepted, unrecorded message per SMTP session in flight at the kill.
    assert duplicates <= 2 * CONCURRENCY


def test_sigterm_to_the_parent_stops_every_process_gracefully(
    conn: Conn, db_url: str, catcher: Catcher, tmp_path: Path
) -> None:
    emails = addresses(3000)
    _, bid = send_campaign(conn, "news", emails)
    parent = _start(worker_env(db_url, catcher.url), tmp_path / "parent.log", 2)
    try:
        assert wait_until(lambda: len(_children(conn)) == 2, 30)
        assert wait_until(lambda: catcher.received_count() >= 300, 60)
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(30) == 0
    finally:
        if parent.poll() is None:
            parent.kill()
    # Each child finished its messages in flight, gave back the rest and deregistered.
    assert _children(conn) == []
    held = conn.execute(
        "SELECT count(*) AS n FROM broadcast_jobs WHERE broadcast_id = %s AND status = 'sending'",
        (bid,),
    ).fetchone()
    assert held is not None and held["n"] == 0
    assert catcher.duplicates() == {}
    sent = conn.execute(
        "SELECT count(*) AS n FROM broadcast_jobs WHERE broadcast_id = %s AND status = 'sent'",
        (bid,),
    ).fetchone()
    assert sent is not None and sent["n"] == catcher.received_count()


def test_worker_without_flags_runs_one_process_per_core_up_to_the_cap(
    conn: Conn, db_url: str, catcher: Catcher, tmp_path: Path
) -> None:
    expected = min(len(os.sched_getaffinity(0)), MAX_AUTO_PROCESSES)
    log = tmp_path / "worker.log"
    proc = _start(worker_env(db_url, catcher.url), log, None)
    try:
        assert wait_until(lambda: len(_children(conn)) == expected, 30), log.read_text()
        rows = conn.execute("SELECT pid, concurrency FROM workers").fetchall()
        assert [r["concurrency"] for r in rows] == [DEFAULT_CONCURRENCY] * expected
        assert proc.pid not in {r["pid"] for r in rows} or expected == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _children(conn) == []


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _libraries(pid: int) -> set[str]:
    maps = Path(f"/proc/{pid}/maps").read_text()
    return {name for name in WORKER_LIBRARIES if name in maps}


def _said(log: Path) -> str:
    """The log without its import times."""
    lines = log.read_text().splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("import time:"))


def _imported_by_the_last_interpreter(log: Path) -> set[str]:
    """What the last interpreter started in the log imported, and every process forked from it
    (each module once: a fork lists only its own): the supervisor `senddock worker` execs."""
    lines = log.read_text().rsplit(IMPORT_TIMES, 1)[-1].splitlines()
    return {line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")}


def test_the_supervisor_loads_nothing_a_worker_needs_and_still_supervises(
    conn: Conn, db_url: str, catcher: Catcher, tmp_path: Path
) -> None:
    emails = addresses(500)
    cid, _ = send_campaign(conn, "news", emails)
    log = tmp_path / "parent.log"
    argv = [sys.executable, "-m", "senddock", "-v", "worker", "--processes", "2"]
    argv += ["--concurrency", str(CONCURRENCY)]
    env = worker_env(db_url, catcher.url, PYTHONPROFILEIMPORTTIME="1")
    with open(log, "ab") as out:
        parent = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        assert wait_until(lambda: len(_children(conn)) == 2, 30), _said(log)
        children = _children(conn)
        assert wait_until(lambda: campaign_done(conn, cid), 60), _said(log)
        # The children loaded what they send with (forked by a launcher that loaded it once,
        # then adopted); the parent, through it all, none of it.
        assert all(_parent_of(pid) == parent.pid for pid in children)
        assert all(_libraries(pid) == set(WORKER_LIBRARIES) for pid in children)
        assert _libraries(parent.pid) == set(), _said(log)
        # And it supervises as before: a child killed is written down and replaced.
        os.kill(children[0], signal.SIGKILL)
        assert wait_until(
            lambda: children[0] not in _children(conn) and len(_children(conn)) == 2, 30
        ), _said(log)
        assert _libraries(parent.pid) == set(), _said(log)
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(30) == 0
    finally:
        if parent.poll() is None:
            parent.kill()
    deaths = conn.execute("SELECT pid, reason FROM worker_deaths").fetchall()
    assert [(d["pid"], d["reason"]) for d in deaths] == [
        (children[0], "worker process killed by SIGKILL")
    ]
    assert sorted(catcher.count_by_rcpt()) == sorted(emails)
    # The command line parsed the options and made way for the supervisor: neither it, nor a
    # worker, nor the replacement, nor the death note ever imported click.
    imported = _imported_by_the_last_interpreter(log)
    cli = {m for m in imported if any(m == p or m.startswith(p + ".") for p in COMMAND_LINE)}
    assert cli == set()
    assert {"senddock.delivery.processes", "senddock.runtime"} <= imported  # theirs, listed


# A worker forked from the supervisor imports everything before it installs its handlers
# (runtime.run_worker); this stands in for that: slow, holding nothing, no handler of its own.
STARTING = """
import sys, time
from senddock.delivery import processes

def work() -> int:
    time.sleep(20)
    return 3  # never reached: asked to stop first

sys.exit(processes.run_processes(2, work))
"""


def test_a_stop_while_workers_are_still_starting_ends_the_command_with_0() -> None:
    """SIGTERM reaching workers that hold nothing yet is a clean stop, not a death by signal:
    before, they died of it and `senddock worker` exited 15 (seen in the chaos suite)."""
    src = str(Path(__file__).resolve().parent.parent / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-c", STARTING], env=env)
    try:
        assert wait_until(lambda: len(_kids(proc.pid)) == 2, 20)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _kids(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []
