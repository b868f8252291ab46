"""Against an outside SMTP server: Postfix's smtp-sink, counted from its own dump files.

smtp-sink (`-d`) writes every mail transaction it accepts to a file of its own, with the
envelope recipients as X-Rcpt-Args lines, so what it received is counted on its side.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from crash_support import (
    Fleet,
    addresses,
    campaign_done,
    held_by,
    sessions_gone,
    worker_id,
)
from senddock.testing.catcher import message_id_of
from support import Conn, jobs, send_campaign, unfinished, wait_until, worker_env

CONCURRENCY = 5
RCPT = re.compile(rb"^X-Rcpt-Args: <([^>]*)>", re.MULTILINE)


class DumpingSink:
    """A running smtp-sink that dumps each accepted transaction to a file in `dump`."""

    def __init__(self, exe: str, dump: Path) -> None:
        self.dump = dump
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        cmd = [exe, "-d", f"{dump}/%Y%m%d%H%M%S.", "-c", f"127.0.0.1:{self.port}", "1000"]
        if os.geteuid() == 0:
            cmd[1:1] = ["-u", "nobody"]  # smtp-sink refuses to run as root
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"smtp-sink did not start: {' '.join(cmd)}")

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}?tls=none"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def deliveries(self) -> list[tuple[str, str | None]]:
        """(recipient, Message-ID) for every recipient of every transaction dumped."""
        found: list[tuple[str, str | None]] = []
        for path in self.dump.iterdir():
            data = path.read_bytes()
            mid = message_id_of(data)
            found += [(rcpt.decode().lower(), mid) for rcpt in RCPT.findall(data)]
        return found


@pytest.fixture
def dumping_sink() -> Iterator[DumpingSink]:
    """Postfix's smtp-sink, dumping what it accepts; required where the CI says so."""
    exe = shutil.which("smtp-sink") or (
        "/usr/sbin/smtp-sink" if os.path.exists("/usr/sbin/smtp-sink") else None
    )
    if exe is None:
        if os.environ.get("SENDDOCK_REQUIRE_SMTP_SINK"):
            pytest.fail("smtp-sink is required (SENDDOCK_REQUIRE_SMTP_SINK) but not installed")
        pytest.skip("Postfix's smtp-sink is not installed (.ci/run installs it)")
    dump = Path(tempfile.mkdtemp(prefix="sdsink"))
    dump.chmod(0o777)  # it writes as the unprivileged user it switched to
    sink = DumpingSink(exe, dump)
    try:
        yield sink
    finally:
        sink.stop()
        shutil.rmtree(dump, ignore_errors=True)


def test_smtp_sink_receives_every_recipient_once_with_its_own_message_id(
    conn: Conn, db_url: str, dumping_sink: DumpingSink, fleet: Fleet
) -> None:
    emails = addresses(1000)
    cid, bid = send_campaign(conn, "news", emails)
    proc = fleet.start(worker_env(db_url, dumping_sink.url), "worker")
    assert wait_until(lambda: campaign_done(conn, cid), 90), unfinished(conn, bid)
    assert proc.stop() == 0

    rows = jobs(conn, bid)
    assert Counter(r["status"] for r in rows.values()) == Counter(sent=len(emails))
    assert {r["last_code"] for r in rows.values()} == {250}
    assert len({r["message_id"] for r in rows.values()}) == len(emails)
    dumping_sink.stop()
    got = dumping_sink.deliveries()
    assert Counter(rcpt for rcpt, _ in got) == Counter({e: 1 for e in emails})
    assert all(mid == rows[rcpt]["message_id"] for rcpt, mid in got)


def test_smtp_sink_worker_killed_mid_send_loses_nobody(
    conn: Conn, db_url: str, dumping_sink: DumpingSink, fleet: Fleet
) -> None:
    emails = addresses(1000)
    cid, bid = send_campaign(conn, "news", emails)
    # The resend setting (issue 23): this test proves that mode's bound, at most one duplicate
    # a session; the default (unconfirmed, never resent) is tests/test_unconfirmed.py's.
    env = worker_env(
        db_url, dumping_sink.url, SENDDOCK_LEASE_SECONDS="6", SENDDOCK_UNCONFIRMED="resend"
    )
    first = fleet.start(env, "killed")
    dead = worker_id(conn, first)
    assert wait_until(lambda: len(os.listdir(dumping_sink.dump)) >= 300, 60)
    assert unfinished(conn, bid) > 0
    first.kill()
    assert wait_until(lambda: sessions_gone(conn, first), 30)
    assert held_by(conn, dead), "the kill landed while the worker held no claim"
    second = fleet.start(env, "restarted")
    assert wait_until(lambda: campaign_done(conn, cid), 90), unfinished(conn, bid)
    assert second.stop() == 0

    rows = jobs(conn, bid)
    assert Counter(r["status"] for r in rows.values()) == Counter(sent=len(emails))
    dumping_sink.stop()
    got = dumping_sink.deliveries()
    counts = Counter(rcpt for rcpt, _ in got)
    assert counts.keys() == set(emails), "nobody undelivered, nobody unknown"
    # At most the one accepted-but-unrecorded message of each session in flight at the kill,
    # each with the job's Message-ID.
    assert sum(counts.values()) - len(emails) <= CONCURRENCY
    assert all(mid == rows[rcpt]["message_id"] for rcpt, mid in got)
