"""A campaign's whole life through real parts (issue 33, item 3): a test of the product.

A real `senddock worker` (held to a rate) sends through a private Postfix relay to a remote MX
(aiosmtpd, senddock.testing.Catcher) that refuses 3 % at RCPT with 550 5.1.1 and defers 2 %
once with 451; Postfix takes everyone with 250 and mails its DSNs back to each job's VERP
return path, on a real `senddock bounces serve`; the MX's "mailbox provider" mails an ARF
complaint (RFC 5965) for 0.5 % a few seconds after delivery to the same return path. Meanwhile
one subscriber unsubscribes by the one-click link the MX received (a real `senddock serve`),
the worker is SIGKILLed and another started, and its unconfirmed jobs are settled as the README
tells an operator: `campaign reconcile --log` with the relay's log, which must confirm exactly
those the relay queued (the test reads the log itself) and send again the others the log
covers; a person sends again what it could not tell (`resend-unconfirmed --job`).

The campaign must end `sent` with every count exact on every surface, the MX must hold one
copy for each deliverable recipient, and the next campaign must skip exactly the bounced, the
complained and the unsubscribed. The same with a pause and resume mid-send, and with a cancel.

Before 0026 (9581e16) the first DSN that landed mid-send left the campaign `sending` for good:
this test then times out waiting for `sent` (checked against 9581e16~1).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import smtplib
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.parser import BytesHeaderParser
from email.utils import formatdate
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import postfix_relay
from senddock.queue.counts import WAITING, Counts, count
from senddock.testing import Catcher, Fault
from senddock.testing.catcher import Received
from senddock.testing.proof import at_server
from senddock.testing.workers import WorkerProcess
from senddock.web import auth
from support import Conn, jobs, send_campaign, senddock, wait_until, worker_env
from test_bounce_cli import _listening
from test_bounce_end_to_end import need
from test_dashboard import EMAIL, PASSWORD, first_event, logged_in
from web_support import Server, free_ports, make_token, start_server

# Who is who, by the local part's prefix; mixed through the list by index.
GONE = "gone"  # refused by the MX at RCPT, 550 5.1.1: a DSN from the relay (3 %)
BUSY = "busy"  # deferred once by the MX, 451: the relay tries again (2 %)
GRUMPY = "grumpy"  # delivered, then reported as spam by the mailbox provider (0.5 %)
READER = "reader"  # delivered


def kind_of(i: int) -> str:
    if i % 100 in (7, 41, 77):
        return GONE
    if i % 50 == 13:
        return BUSY
    if i % 200 == 99:
        return GRUMPY
    return READER


def audience(n: int) -> list[str]:
    return [f"{kind_of(i)}{i}@example.com" for i in range(n)]


def local(address: str) -> str:
    return address.split("@", 1)[0].lower()


def remote_mx_rule(address: str) -> Fault | None:
    """The remote MX's per-recipient replies."""
    if local(address).startswith(GONE):
        return Fault.reject_rcpt("550 5.1.1 <{addr}>: Recipient address rejected: User unknown")
    if local(address).startswith(BUSY):
        return Fault.defer_rcpt(attempts=1, reply="451 4.2.1 <{addr}>: mailbox busy, try later")
    return None


_HEADERS = BytesHeaderParser()


def header_block(data: bytes) -> bytes:
    return data.split(b"\r\n\r\n", 1)[0]


def arf(r: Received) -> bytes:
    """An RFC 5965 abuse report about `r`, quoting its headers, as a feedback loop mails it."""
    return (
        b"From: Feedback Loop <fbl@mx.example.com>\r\n"
        b"To: " + r.mail_from.encode() + b"\r\n"
        b"Subject: FW: complaint about a message to " + r.rcpt.encode() + b"\r\n"
        b"Date: " + formatdate().encode() + b"\r\n"
        b"MIME-Version: 1.0\r\n"
        b'Content-Type: multipart/report; report-type=feedback-report; boundary="FBL0"\r\n'
        b"\r\n--FBL0\r\n"
        b"Content-Type: text/plain; charset=us-ascii\r\n\r\n"
        b"This is an email abuse report for a message our user marked as spam.\r\n"
        b"\r\n--FBL0\r\n"
        b"Content-Type: message/feedback-report\r\n\r\n"
        b"Feedback-Type: abuse\r\n"
        b"User-Agent: RemoteMX-FBL/1.0\r\n"
        b"Version: 1\r\n"
        b"Original-Mail-From: <" + r.mail_from.encode() + b">\r\n"
        b"Original-Rcpt-To: <" + r.rcpt.encode() + b">\r\n"
        b"Source-IP: 127.0.0.1\r\n"
        b"\r\n--FBL0\r\n"
        b"Content-Type: text/rfc822-headers\r\n\r\n" + header_block(r.data) + b"\r\n"
        b"\r\n--FBL0--\r\n"
    )


class FeedbackLoop:
    """The remote mailbox provider's feedback loop: `delay` seconds after a complainer's
    message arrived at the MX, an ARF report goes to that message's return path (the bounce
    domain's MX, which is `senddock bounces serve`)."""

    def __init__(self, mx: Catcher, port: int, delay: float = 2.0) -> None:
        self.mx = mx
        self.port = port
        self.delay = delay
        self.sent: dict[str, float] = {}  # complainer -> when its report was accepted
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feedback-loop", daemon=True)

    def __enter__(self) -> FeedbackLoop:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        seen = 0
        due: list[Received] = []
        while not self._stop.wait(0.1):
            got = self.mx.received()
            due += [r for r in got[seen:] if local(r.rcpt).startswith(GRUMPY)]
            seen = len(got)
            now = time.time()
            for r in [r for r in due if r.at + self.delay <= now]:
                with contextlib.suppress(OSError, smtplib.SMTPException):
                    with smtplib.SMTP("127.0.0.1", self.port, timeout=10) as smtp:
                        smtp.sendmail("fbl@mx.example.com", [r.mail_from], arf(r))
                    self.sent[r.rcpt.lower()] = time.time()
                    due.remove(r)  # else tried again on the next turn


# A line of `campaign reconcile`'s answer: "  job ID  EMAIL  WHAT  what each source said".
VERDICT = re.compile(r"^  job (\d+)  \S+  (confirmed sent|queued again|left)", re.M)


def relay_queued(log: str) -> set[str]:
    """The Message-IDs the relay took into its queue, from its log: the cleanup line names
    the Message-ID, and only a message whose data ended (the 250) reaches the queue manager."""
    queued = set(re.findall(r"postfix/qmgr\[\d+\]: (\w+): from=<", log))
    return {
        mid
        for qid, mid in re.findall(r"postfix/cleanup\[\d+\]: (\w+): message-id=(<[^>\s]*>)", log)
        if qid in queued
    }


def status_json(env: dict[str, str], cid: int) -> dict[str, Any]:
    done = senddock(env, "campaign", "status", str(cid), "--json")
    assert done.returncode == 0, done.stderr
    got: dict[str, Any] = json.loads(done.stdout)
    return got


@dataclass
class Plan:
    """One run: its size and rate, and at what share of `sent` each event happens."""

    n: int
    per_second: int
    unsubscribe_at: float = 0.1
    kill_at: float | None = None
    pause_at: float | None = None
    cancel_at: float | None = None


@dataclass
class Seen:
    """What the test saw happen, for its assertions and its report."""

    started: float = field(default_factory=time.monotonic)
    ended: float = 0.0
    hard_while_sending: int = 0
    complaints_while_sending: int = 0
    unsubscriber: str = ""
    killed_at_sent: int = -1
    unconfirmed: list[dict[str, Any]] = field(default_factory=list)
    confirmed: list[int] = field(default_factory=list)
    resent: list[int] = field(default_factory=list)
    paused_sent: int = -1
    cancelled_at_sent: int = -1
    # Reports recorded before the broadcast ended, by kind (bounce_findings).
    before_the_end: dict[str, int] = field(default_factory=dict)
    # What `campaign cancel` said: not to be sent, in flight, sent.
    cancel_said: tuple[int, int, int] = (-1, -1, -1)


class Life:
    """Every server of one run, started on distinct ports and stopped at exit."""

    def __init__(self, db_url: str, logs: Path, per_second: int) -> None:
        self.db_url = db_url
        self.logs = logs
        self._stack = contextlib.ExitStack()
        try:
            self._start(per_second)
        except BaseException:
            self._stack.close()
            raise

    def _start(self, per_second: int) -> None:
        db_url, logs = self.db_url, self.logs
        mx_port, relay_port, bounce_port, web_port = free_ports(4)
        self.mx = self._stack.enter_context(Catcher(remote_mx_rule, port=mx_port))
        self.relay = self._stack.enter_context(
            postfix_relay.private_postfix(relay_port, mx_port, bounce_port)
        )
        public = {
            "SENDDOCK_BOUNCE_DOMAIN": postfix_relay.BOUNCE_DOMAIN,
            "SENDDOCK_PUBLIC_URL": f"http://127.0.0.1:{web_port}",  # the links in messages
        }
        self.env = worker_env(db_url, f"{self.relay.url}&per_second={per_second}", **public)
        self.env.pop("SENDDOCK_UNCONFIRMED", None)  # the default: unconfirmed waits for a person
        bounces_log = (logs / "bounces-serve.log").open("ab")
        self._stack.callback(bounces_log.close)
        self.bounces = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "senddock",
                "-v",
                "bounces",
                "serve",
                "--port",
                str(bounce_port),
            ],
            env=self.env,
            stdout=bounces_log,
            stderr=subprocess.STDOUT,
        )
        self._stack.callback(_stop, self.bounces)
        assert wait_until(lambda: _listening(bounce_port), timeout=30), "bounces serve is deaf"
        self.feedback = self._stack.enter_context(FeedbackLoop(self.mx, bounce_port))
        self.web: Server = start_server(
            db_url,
            self.relay.url,
            workers=False,
            port=web_port,
            env=public,
        )
        self._stack.callback(self.web.stop)
        self.token = make_token(db_url)
        self.workers: list[WorkerProcess] = []
        self._stack.callback(self.stop_workers)

    def __enter__(self) -> Life:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def start_worker(self) -> WorkerProcess:
        name = f"worker-{len(self.workers) + 1}"
        proc = WorkerProcess.start(
            {**self.env, "PGAPPNAME": f"senddock-life-{name}"},
            log=self.logs / f"{name}.log",
            name=name,
            concurrency=5,
            own_session=True,  # a process group of its own, killed whole below
        )
        self.workers.append(proc)
        return proc

    def kill_worker(self, proc: WorkerProcess) -> None:
        """SIGKILL its whole process group, wherever it is, and reap it."""
        proc.ended_on_purpose = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.popen.wait(30)

    def stop_workers(self) -> None:
        for proc in self.workers:
            if proc.alive():
                proc.stop()

    def worker_logs(self) -> str:
        return "\n".join(f"===== {p.name}: {p.text()[-4000:]}" for p in self.workers)

    def cli(self, *args: str) -> str:
        done = senddock(self.env, *args)
        assert done.returncode == 0, f"senddock {' '.join(args)}: {done.stderr}"
        return done.stdout

    def unsubscribe(self) -> str:
        """POST the one-click link of the first reader's message the MX got (RFC 8058)."""
        r = next(r for r in self.mx.received() if local(r.rcpt).startswith(READER))
        head = _HEADERS.parsebytes(header_block(r.data) + b"\r\n\r\n")
        assert head["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
        link = re.search(r"<(https?://[^>]+)>", "".join(str(head["List-Unsubscribe"]).split()))
        assert link, head["List-Unsubscribe"]
        assert link.group(1).startswith(self.web.url + "/unsubscribe/"), link.group(1)
        reply = httpx.post(link.group(1), data={"List-Unsubscribe": "One-Click"}, timeout=30)
        assert reply.status_code == 200, reply.text
        return r.rcpt.lower()

    def settle_unconfirmed(self, cid: int, seen: Seen) -> None:
        """What the README tells an operator: `campaign reconcile --log` with the relay's log
        (issue 41), then a person for what it could not tell. The test reads the same log
        itself: reconcile must confirm exactly the unconfirmed whose Message-ID the relay
        queued, and of the others send again only those the log covers (it says "cannot
        tell" of a job whose dot is within its slack of the log's last line); the person
        sends the rest again with `resend-unconfirmed --job`."""
        st = status_json(self.env, cid)
        held = st["unconfirmed_jobs"]
        assert len(held) == st["unconfirmed"]
        assert st["state"] == WAITING, st  # only a person can end it now
        log = self.relay.root / "maillog"
        queued = relay_queued(log.read_text(errors="replace"))
        seen.unconfirmed += held
        went = sorted(int(j["id"]) for j in held if j["message_id"] in queued)
        lost = sorted(int(j["id"]) for j in held if j["message_id"] not in queued)
        said = self.cli("campaign", "reconcile", str(cid), "--log", str(log))
        verdicts = {int(m.group(1)): m.group(2) for m in VERDICT.finditer(said)}
        assert sorted(verdicts) == sorted(went + lost), said
        assert [i for i in sorted(verdicts) if verdicts[i] == "confirmed sent"] == went, said
        left = [i for i in lost if verdicts[i] == "left"]
        assert all(verdicts[i] in ("queued again", "left") for i in lost), said
        assert "cannot tell" in said or not left, said
        if left:
            done = self.cli(
                "campaign", "resend-unconfirmed", str(cid), *(f"--job={i}" for i in left)
            )
            assert done.startswith(f"campaign {cid}: {len(left)} unconfirmed"), done
        seen.confirmed += went
        seen.resent += lost


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def campaign_status(conn: Conn, cid: int) -> str:
    row = conn.execute("SELECT status FROM campaigns WHERE id = %s", (cid,)).fetchone()
    assert row is not None
    return str(row["status"])


def drive(life: Life, conn: Conn, plan: Plan, cid: int, bid: int) -> Seen:
    """Watch the campaign as an operator would, doing each of the plan's events on time, until
    it ends (`sent`, or `cancelled` with nothing in flight)."""
    seen = Seen()
    worker = life.start_worker()
    deadline = time.monotonic() + 60 + 2.5 * plan.n / plan.per_second
    drained_at: float | None = None
    while True:
        c = count(conn, bid)
        status = campaign_status(conn, cid)
        if status == "sending":
            seen.hard_while_sending = max(seen.hard_while_sending, c.bounced_later)
            seen.complaints_while_sending = max(seen.complaints_while_sending, c.complaints)
        if status == "sent" or (status == "cancelled" and not c.sending):
            break
        # Nothing left for anyone, yet not `sent`: the finisher runs every 5 s (a third of the
        # lease), so three of its periods later it is stuck (issue 33, before migration 0026).
        drained = not (c.pending or c.sending or c.retry or c.unconfirmed)
        drained_at = (drained_at or time.monotonic()) if drained else None
        assert drained_at is None or time.monotonic() - drained_at < 15, (
            f"campaign {cid} still {status} 15 s after its last job ended: {c}"
        )
        assert time.monotonic() < deadline, (
            f"campaign {cid} still {status} after {time.monotonic() - seen.started:.0f} s: {c}\n"
            + life.worker_logs()
        )
        assert worker.alive(), f"worker exited {worker.returncode}:\n{life.worker_logs()}"
        if not seen.unsubscriber and c.sent >= plan.unsubscribe_at * plan.n:
            seen.unsubscriber = life.unsubscribe()
        if plan.kill_at is not None and seen.killed_at_sent < 0 and c.sent >= plan.kill_at * plan.n:
            # Killed the moment a final dot is about to go or gone (its mark is committed), so
            # that, most runs, the rescue leaves a job unconfirmed for a person to settle.
            wait_until(lambda: dot_in_flight(conn, bid), timeout=10, every=0.001)
            life.kill_worker(worker)
            seen.killed_at_sent = c.sent
            worker = life.start_worker()
        if plan.pause_at is not None and seen.paused_sent < 0 and c.sent >= plan.pause_at * plan.n:
            pause(life, conn, cid, bid, seen)
        if (
            plan.cancel_at is not None
            and seen.cancelled_at_sent < 0
            and c.sent >= plan.cancel_at * plan.n
        ):
            said = life.cli("campaign", "cancel", str(cid))
            found = re.search(r"(\d+) messages? will not .*; (\d+) in flight .*; (\d+) sent", said)
            assert found, said
            not_sent, in_flight, sent_then = (int(g) for g in found.groups())
            seen.cancel_said = (not_sent, in_flight, sent_then)
            seen.cancelled_at_sent = c.sent
        if c.unconfirmed and not (c.pending or c.sending or c.retry) and status == "sending":
            life.settle_unconfirmed(cid, seen)
        time.sleep(0.2)
    seen.ended = time.monotonic()
    return seen


def dot_in_flight(conn: Conn, bid: int) -> bool:
    """A job still `sending` whose final dot is marked (on its row, or carried by its session's
    previous outcome: migration 0025)."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM broadcast_jobs j"
        " WHERE j.broadcast_id = %s AND j.status = 'sending' AND (j.dot_at IS NOT NULL"
        " OR EXISTS (SELECT 1 FROM senddock_carried_mark(j.id, j.owner, j.claimed_at)))) AS yes",
        (bid,),
    ).fetchone()
    return row is not None and bool(row["yes"])


def pause(life: Life, conn: Conn, cid: int, bid: int, seen: Seen) -> None:
    """Pause: the messages in flight land, then nothing moves for 3 s; resume."""
    life.cli("campaign", "pause", str(cid))
    assert wait_until(lambda: count(conn, bid).sending == 0, timeout=30)
    time.sleep(1)  # the relay logs the last of those a moment after its 250
    seen.paused_sent = count(conn, bid).sent
    at_relay = len(relay_queued(life.relay.log()))
    time.sleep(3)
    assert campaign_status(conn, cid) == "paused"
    assert count(conn, bid).sent == seen.paused_sent
    assert len(relay_queued(life.relay.log())) == at_relay  # nothing reached the relay
    life.cli("campaign", "resume", str(cid))


def settled(life: Life, conn: Conn, bid: int, deliverable: int, complainers: int) -> bool:
    """Every DSN and complaint landed and the MX has all it will get."""
    c = count(conn, bid)
    return (
        c.bounced_later == len(refused_at_mx(life.mx))
        and c.complaints == complainers
        and len(life.feedback.sent) == complainers
        and len({r.rcpt.lower() for r in life.mx.received()}) == deliverable
    )


def reports_before_the_end(conn: Conn, bid: int) -> dict[str, int]:
    """Reports matched to the broadcast's jobs and recorded before it ended (finished or
    cancelled), by kind: what landed while it was still sending."""
    rows = conn.execute(
        "SELECT f.kind, count(*) AS n FROM bounce_findings f JOIN broadcasts b"
        " ON b.id = f.broadcast_id WHERE b.id = %s AND f.created_at < b.finished_at"
        " GROUP BY f.kind",
        (bid,),
    ).fetchall()
    return {str(r["kind"]): int(r["n"]) for r in rows}


def refused_at_mx(mx: Catcher) -> set[str]:
    return {a for a in mx.attempts_by_rcpt if local(a).startswith(GONE)}


def metrics(life: Life) -> dict[tuple[str, str], float]:
    reply = httpx.get(
        life.web.url + "/metrics", headers={"Authorization": f"Bearer {life.token}"}, timeout=30
    )
    assert reply.status_code == 200, reply.text
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            label = next(iter(sample.labels.values()), "")
            found[(sample.name, label)] = sample.value
    return found


def assert_every_surface(life: Life, conn: Conn, cid: int, want: dict[str, Any]) -> None:
    """CLI status and list, API detail and list, the dashboard's live data and /metrics all
    say `want`."""
    st = status_json(life.env, cid)
    assert {k: st[k] for k in want} == want, st

    [row] = [r for r in json.loads(life.cli("campaign", "list", "--json")) if r["id"] == cid]
    assert {k: row[k] for k in want if k in row} == {k: want[k] for k in want if k in row}, row

    api = {"Authorization": f"Bearer {life.token}"}
    detail = httpx.get(f"{life.web.url}/api/v1/campaigns/{cid}", headers=api, timeout=30)
    assert detail.status_code == 200, detail.text
    assert {k: detail.json()[k] for k in want} == want
    page = httpx.get(f"{life.web.url}/api/v1/campaigns", headers=api, timeout=30).json()
    [item] = [i for i in page["items"] if i["id"] == cid]
    assert {k: item[k] for k in want if k in item} == {k: want[k] for k in want if k in item}
    assert {"sent", "failed", "bounced_later", "complaints"} <= item.keys()

    with logged_in(life.web) as (http, _):
        _, one = first_event(http, f"/events/campaigns/{cid}")
        assert {k: one[k] for k in want if k in one} == {k: want[k] for k in want if k in one}
        assert {"status", "total", "sent", "pending"} <= one.keys()
        _, many = first_event(http, "/events/campaigns")
        [mine] = [m for m in many["campaigns"] if m["id"] == cid]
        assert {k: mine[k] for k in want if k in mine} == {k: want[k] for k in want if k in mine}

    m = metrics(life)  # every broadcast's: this test's is the only one so far
    assert m.get(("senddock_messages", "sent"), 0) == want["sent"]
    assert m.get(("senddock_messages", "cancelled"), 0) == want["cancelled"]
    assert m[("senddock_later_reports", "hard")] == want["bounced_later"]
    assert m[("senddock_later_reports", "complaint")] == want["complaints"]
    assert m[("senddock_worker_deaths_total", "")] == want["worker_deaths"]
    for state in ("pending", "sending", "retry", "unconfirmed"):
        assert m[("senddock_queue_jobs", state)] == want[state], state


def suppressed(conn: Conn) -> dict[str, str]:
    rows = conn.execute("SELECT lower(email) AS email, reason FROM suppressions").fetchall()
    return {str(r["email"]): str(r["reason"]) for r in rows}


@pytest.fixture
def life_of(db_url: str, tmp_path: Path) -> Iterator[Callable[[int], Life]]:
    """Starts the servers of a run (at most one a test), stopped at teardown."""
    started: list[Life] = []

    def make(per_second: int) -> Life:
        need()
        run = Life(db_url, tmp_path, per_second)
        started.append(run)
        return run

    yield make
    for run in started:
        run.__exit__()


def run_campaign(life: Life, conn: Conn, plan: Plan) -> tuple[int, int, list[str], Seen]:
    auth.create_admin(conn, EMAIL, PASSWORD)
    emails = audience(plan.n)
    cid, bid = send_campaign(conn, "news", emails, name="whole life")
    seen = drive(life, conn, plan, cid, bid)
    return cid, bid, emails, seen


def report(plan: Plan, seen: Seen, c: Counts, life: Life) -> None:
    print(
        f"\nwhole life n={plan.n} per_second={plan.per_second}:"
        f" ended in {seen.ended - seen.started:.1f} s, MX got {life.mx.received_count()},"
        f" refused at the MX {len(refused_at_mx(life.mx))},"
        f" hard DSNs while sending {seen.hard_while_sending} of {c.bounced_later},"
        f" complaints while sending {seen.complaints_while_sending} of {c.complaints},"
        f" reports recorded before the end {seen.before_the_end},"
        f" killed at {seen.killed_at_sent} sent, unconfirmed {len(seen.unconfirmed)}"
        f" (confirmed {len(seen.confirmed)}, resent {len(seen.resent)}),"
        f" paused at {seen.paused_sent}, cancelled at {seen.cancelled_at_sent}; counts {c}"
    )


def check_ended(life: Life, conn: Conn, plan: Plan, cid: int, bid: int, seen: Seen) -> None:
    """The end of a run, `sent` or `cancelled`: the MX, the rows, every surface, the next
    campaign."""
    rows = jobs(conn, bid)
    sent = {a for a, j in rows.items() if j["status"] == "sent"}
    cancelled = {a for a, j in rows.items() if j["status"] == "cancelled"}
    assert sent | cancelled == set(rows), {j["status"] for j in rows.values()}
    deliverable = {a for a in sent if not local(a).startswith(GONE)}
    complainers = {a for a in deliverable if local(a).startswith(GRUMPY)}
    assert wait_until(
        lambda: settled(life, conn, bid, len(deliverable), len(complainers)), timeout=60
    ), (count(conn, bid), len(life.feedback.sent), life.mx.received_count())
    rows = jobs(conn, bid)  # again: with every report on them

    # The remote MX: one copy for each deliverable recipient, with its job's Message-ID.
    proof = at_server(life.mx.received(), deliverable)
    assert not proof.undelivered, proof.undelivered[:5]
    assert not proof.strangers(), proof.strangers()[:5]
    assert not proof.extra, proof.extra
    for rcpt, got in proof.copies.items():
        assert [r.message_id for r in got] == [rows[rcpt]["message_id"]], rcpt
    # Refused at RCPT (after the relay's 250): exactly the gone among the sent; each deferred
    # one was asked twice (451, then 250), everyone else once.
    assert refused_at_mx(life.mx) == {a for a in sent if local(a).startswith(GONE)}
    asked = life.mx.attempts_by_rcpt
    assert {a: asked[a] for a in deliverable} == {
        a: 2 if local(a).startswith(BUSY) else 1 for a in deliverable
    }
    # A cancelled job never reached the relay.
    at_relay = relay_queued(life.relay.log())
    assert not {rows[a]["message_id"] for a in cancelled} & at_relay
    assert {rows[a]["message_id"] for a in sent} <= at_relay

    # The rows: each report on its job, each suppression for its reason.
    kinds = {a: j["bounce_kind"] for a, j in rows.items() if j["bounce_kind"]}
    gone = refused_at_mx(life.mx)
    assert kinds == {**{a: "hard" for a in gone}, **{a: "complaint" for a in complainers}}
    assert suppressed(conn) == {
        **{a: "bounce" for a in gone},
        **{a: "complaint" for a in complainers},
        seen.unsubscriber: "unsubscribe",
    }

    c = count(conn, bid)
    seen.before_the_end = reports_before_the_end(conn, bid)
    report(plan, seen, c, life)
    want: dict[str, Any] = {
        "status": "cancelled" if plan.cancel_at is not None else "sent",
        "total": plan.n,
        "sent": len(deliverable) + len(gone),
        "failed": 0,
        "cancelled": len(cancelled),
        "pending": 0,
        "sending": 0,
        "retry": 0,
        "unconfirmed": 0,
        "bounced_later": len(gone),
        "complaints": len(complainers),
        # The SIGKILLed worker held some of its messages: its death is on the record.
        "worker_deaths": 1 if plan.kill_at is not None else 0,
    }
    assert_every_surface(life, conn, cid, want)
    if plan.cancel_at is not None:
        # Only the messages in flight at the cancel went after it; the rest never went.
        cancelled_now, in_flight, sent_then = seen.cancel_said
        assert sent_then <= len(sent) <= sent_then + in_flight
        assert cancelled_now <= len(cancelled) <= cancelled_now + in_flight

    # The next campaign skips exactly the bounced, the complained and the unsubscribed. (The
    # workers stop first: a running one would take its enqueue's chunks, SKIP LOCKED, and
    # enqueue_all would return before they are in.)
    life.stop_workers()
    _, nxt = send_campaign(conn, "news", audience(plan.n), name="next")
    skipped = set(audience(plan.n)) - set(jobs(conn, nxt))
    assert skipped == gone | complainers | {seen.unsubscriber}


def test_a_whole_campaign_through_a_real_relay_ends_sent_with_every_count_exact(
    life_of: Callable[[int], Life], conn: Conn
) -> None:
    """5,000 recipients at 80 a second: DSNs, complaints, an unsubscribe and a SIGKILL land
    while it sends; it still ends `sent`, every count exact, one copy each at the MX."""
    plan = Plan(n=5000, per_second=80, kill_at=0.4)
    life = life_of(plan.per_second)
    cid, bid, _, seen = run_campaign(life, conn, plan)
    assert seen.hard_while_sending > 0 and seen.complaints_while_sending > 0
    assert seen.killed_at_sent > 0 and seen.unsubscriber
    check_ended(life, conn, plan, cid, bid, seen)
    # DSNs and complaints were recorded while it sent, and it still ended.
    assert seen.before_the_end.get("hard", 0) > 0
    assert seen.before_the_end.get("complaint", 0) > 0


def test_a_whole_campaign_paused_and_resumed_mid_send_ends_sent_with_every_count_exact(
    life_of: Callable[[int], Life], conn: Conn
) -> None:
    """1,000 recipients, the same parts, a pause of 3 s in the middle (nothing moves) and a
    SIGKILL after the resume."""
    plan = Plan(n=1000, per_second=50, pause_at=0.3, kill_at=0.6)
    life = life_of(plan.per_second)
    cid, bid, _, seen = run_campaign(life, conn, plan)
    assert seen.paused_sent > 0 and seen.hard_while_sending > 0
    check_ended(life, conn, plan, cid, bid, seen)


def test_a_whole_campaign_cancelled_mid_send_ends_cancelled_and_sends_no_cancelled_job(
    life_of: Callable[[int], Life], conn: Conn
) -> None:
    """1,000 recipients, the same parts, cancelled at half: what was sent is counted once and
    got one copy; no cancelled job reached the relay."""
    plan = Plan(n=1000, per_second=50, cancel_at=0.5)
    life = life_of(plan.per_second)
    cid, bid, _, seen = run_campaign(life, conn, plan)
    assert seen.cancelled_at_sent > 0
    check_ended(life, conn, plan, cid, bid, seen)
