"""`senddock demo` on a machine with nothing running: its own Postgres and SMTP catcher, a worker
SIGKILLed mid-broadcast, and a proof computed at the SMTP server. It must leave nothing behind."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from support import senddock, wait_until, worker_env

# 400 subscribers: 2 % bounce-* and 3 % flaky-* (see senddock.demo.make_audience).
COUNT = 400
BOUNCES = 8
FLAKY = 12


def demo_env() -> dict[str, str]:
    """This environment without SENDDOCK_DATABASE_URL/SMTP_URL, so the demo uses its own parts."""
    env = worker_env("", "")
    for key in ("SENDDOCK_DATABASE_URL", "SENDDOCK_SMTP_URL", "SENDDOCK_RETRY_SCHEDULE"):
        env.pop(key, None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def data_dir_of(output: str) -> str:
    found = re.search(r"^data dir\s+(\S+)$", output, re.MULTILINE)
    assert found, f"the demo did not print its data dir:\n{output}"
    return found.group(1)


def worker_pids_of(output: str) -> list[int]:
    return [int(pid) for pid in re.findall(r"worker pid (\d+) started", output)]


def postgres_running_on(data_dir: str) -> list[str]:
    """Command lines of processes (an embedded postmaster among them) that name `data_dir`."""
    found = subprocess.run(["pgrep", "-af", re.escape(data_dir)], capture_output=True, text=True)
    return found.stdout.splitlines()


def worker_alive(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    zombie = stat.rsplit(")", 1)[1].split()[0] == "Z"
    return b"senddock" in cmdline and b"worker" in cmdline and not zombie


def assert_nothing_left(output: str) -> None:
    data_dir = data_dir_of(output)
    assert postgres_running_on(data_dir) == []
    assert not Path(data_dir).exists(), "the demo's temp dir was not removed"
    pids = worker_pids_of(output)
    assert pids, "the demo never said which workers it started"
    assert [pid for pid in pids if worker_alive(pid)] == []


def test_demo_kills_a_worker_mid_broadcast_and_proves_nobody_was_lost() -> None:
    result = senddock(demo_env(), "demo", "--subscribers", str(COUNT), timeout=240)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr

    assert re.search(r"SIGKILL worker pid \d+ with \d+ messages in flight", out), out
    assert re.search(r"\d+ rows left in 'sending'", out), out
    assert len(worker_pids_of(out)) == 2, out  # the killed one and its replacement
    assert "1/2/2/2/2 s" in out  # it says it shortened the retry schedule

    deliverable = COUNT - BOUNCES
    assert f"delivered at the server: {deliverable} of {deliverable} deliverable" in out, out
    assert "undelivered: 0" in out
    # The default crash mode: what the kill left unconfirmed is confirmed from the server's
    # log or sent again, never both, so nobody is sent to twice.
    assert "crash mode the default (SENDDOCK_UNCONFIRMED=hold)" in out, out
    dup = re.search(r"duplicates: (\d+)(.*)", out)
    assert dup, out
    assert int(dup.group(1)) == 0, out
    assert (
        f"bounced: {BOUNCES} of {BOUNCES} bounce-* addresses suppressed;"
        " received at the server: 0" in out
    ), out
    assert f"retried: {FLAKY} of {FLAKY} flaky-* delivered after >= 3 attempts" in out, out
    assert "PROOF HOLDS" in out
    assert "✗" not in out.split("THE PROOF", 1)[1]

    assert_nothing_left(out)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_demo_interrupted_mid_broadcast_stops_postgres_and_workers(sig: signal.Signals) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "senddock", "demo", "--subscribers", str(COUNT)],
        env=demo_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        # Interrupt once the replacement of the SIGKILLed worker has booted (it rescued the dead
        # one's rows): mid-broadcast, with Postgres, the catcher and a worker all up.
        started = wait_until(
            lambda: "rescued:" in "".join(lines) or "nothing to rescue" in "".join(lines),
            timeout=120,
        )
        assert started, "".join(lines)
        if "nothing to rescue" in "".join(lines):
            time.sleep(2.0)  # no rescue line to wait for: give the replacement time to boot
        data_dir = data_dir_of("".join(lines))
        assert postgres_running_on(data_dir), "the embedded Postgres should be running now"
        proc.send_signal(sig)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    out = "".join(lines)
    assert code == 130, out
    assert "interrupted" in out
    assert "PROOF" not in out
    assert_nothing_left(out)
