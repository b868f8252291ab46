"""`senddock demo`: one whole broadcast with a crash in it, on parts the demo starts itself.

An embedded Postgres and an in-process SMTP catcher (bounce-* addresses get a 550 5.1.1 at
RCPT, flaky-* a 451 twice, then acceptance). A real `senddock worker` subprocess sends the
campaign; at about 40 % the demo SIGKILLs it, starts another, and once the campaign is sent it
proves, from what the SMTP server received and from the rows, that nobody was dropped, bounces
were suppressed, transient failures were retried, and that any duplicate (possible only for a
message in flight at the kill) carries the same Message-ID. Everything it started is stopped on
exit, Ctrl-C included.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import tempfile
import threading
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from senddock.audience import addresses, import_csv
from senddock.audience.importer import write_csv
from senddock.campaigns import broadcast, confirm, create_campaign, resend_unconfirmed, status
from senddock.campaigns.broadcast import enqueue_all
from senddock.config import Settings, SmtpTarget, defaulted
from senddock.db import connect, migrate, sql
from senddock.db.embedded import EmbeddedPostgres
from senddock.delivery.rescuer import LOCK_CLASS
from senddock.queue import unconfirmed_jobs
from senddock.testing import Catcher
from senddock.testing.proof import Proof, at_server
from senddock.testing.workers import WorkerProcess

Conn = psycopg.Connection[dict[str, Any]]

# The demo's retry schedule, and the real default it stands in for.
QUERIES = sql.load(__package__, "demo.sql")
DEMO_RETRIES = "1,2,2,2,2"
USUAL_RETRIES = "30 s/2 m/8 m/30 m/1 h"
KILL_AT = 0.40  # share of the jobs sent when the first worker is SIGKILLed
CONCURRENCY = 5  # senders per worker process
BOUNCE_SHARE = 0.02
FLAKY_SHARE = 0.03
POLL = 0.05  # seconds between two looks at the counts
PAUSE_AFTER_KILL = 1.0  # let the stalled broadcast be seen before the next worker starts

SUBJECT = "{{ subscriber.name }}, your SendDock demo issue"
TEXT = """Hello {{ subscriber.name }},

This is the SendDock demo broadcast. A worker was SIGKILLed while sending it;
you still get it, and only once.
"""
HTML = """<p>Hello {{ subscriber.name }},</p>
<p>This is the SendDock demo broadcast. A worker was SIGKILLed while sending it;
you still get it, and only once.</p>
"""
FROM = "SendDock Demo <demo@example.org>"

FIRST = (
    "Ada Alan Grace Edsger Barbara Donald Frances Ken Radia Linus Margaret Dennis Zoë José"
    " Søren Ngozi Aiko Mateus Priya Chidi Olga Tomás Anaïs Yusuf Mei"
)
LAST = (
    "Lovelace Turing Hopper Dijkstra Liskov Knuth Allen Thompson Perlman Torvalds Hamilton"
    " Ritchie Okafor Tanaka Ferreira Kowalski Müller Núñez Haddad Lindqvist Chen Brontë"
)


class DemoFailed(Exception):
    """The demo cannot go on; the message says why, in one line."""


# -- the audience ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Audience:
    """The generated subscribers, and which of them the catcher will mistreat."""

    rows: list[tuple[str, str]]  # (email, name)
    bounce: frozenset[str]
    flaky: frozenset[str]

    @property
    def deliverable(self) -> frozenset[str]:
        return frozenset(email for email, _ in self.rows) - self.bounce


def _ascii(text: str) -> str:
    text = text.replace("ø", "o").replace("Ø", "O")
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()


def make_audience(count: int, domain: str, seed: int = 2024) -> Audience:
    """`count` named subscribers: ~2 % bounce-N@, ~3 % flaky-N@, the rest ordinary."""
    rng = random.Random(seed)
    firsts, lasts = FIRST.split(), LAST.split()
    n_bounce = max(1, round(count * BOUNCE_SHARE))
    n_flaky = max(1, round(count * FLAKY_SHARE))
    kinds = ["bounce"] * n_bounce + ["flaky"] * n_flaky
    kinds += ["ordinary"] * (count - len(kinds))
    rng.shuffle(kinds)
    rows: list[tuple[str, str]] = []
    bounce: set[str] = set()
    flaky: set[str] = set()
    for i, kind in enumerate(kinds, 1):
        first, last = rng.choice(firsts), rng.choice(lasts)
        local = f"{_ascii(first)}.{_ascii(last)}.{i}" if kind == "ordinary" else f"{kind}-{i}"
        email = f"{local}@{domain}"
        (bounce if kind == "bounce" else flaky if kind == "flaky" else set()).add(email)
        rows.append((email, f"{first} {last}"))
    return Audience(rows, frozenset(bounce), frozenset(flaky))


# -- the demo --------------------------------------------------------------------------------


@dataclass
class Kill:
    """What the demo knows about the worker it SIGKILLed."""

    pid: int
    worker_id: int | None
    in_flight: int
    rescued_after: float | None = None
    # Its unconfirmed jobs (final dot gone, no outcome), settled as a person would: those the
    # server's log shows are confirmed, the others sent again.
    confirmed: int = 0
    resent: int = 0


@dataclass
class Demo:
    """One run of the demo: what it started (to stop it all in `close`) and what it saw."""

    console: Console
    count: int
    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="sddemo-")))
    pg: EmbeddedPostgres | None = None
    catcher: Catcher | None = None
    conn: Conn | None = None
    workers: list[WorkerProcess] = field(default_factory=list)
    # Read once: SENDDOCK_DATABASE_URL and SENDDOCK_SMTP_URL, when set, replace the demo's own.
    settings: Settings = field(default_factory=Settings)
    db_url: str = ""
    smtp_url: str = ""
    outside_db: bool = False
    outside_smtp: bool = False
    started: float = field(default_factory=time.monotonic)
    kill: Kill | None = None

    # -- setup -------------------------------------------------------------------------------

    def run(self) -> int:
        c = self.console
        addresses.configure(True)  # a test setup, as its workers (_worker_env)
        self.outside_db = bool(self.settings.database_url)
        self.outside_smtp = bool(self.settings.smtp_url) and not defaulted(
            self.settings, "smtp_url"
        )
        c.rule(f"[bold]SendDock demo[/] · {self.count:,} subscribers · one worker SIGKILLed")
        c.print(f"data dir   {self.tmp}", soft_wrap=True)
        with self._step("database"):
            self._start_database()
        with self._step("SMTP server"):
            self._start_smtp()
        c.print(
            f"retries    the demo shortens the {USUAL_RETRIES} schedule to"
            f" {DEMO_RETRIES.replace(',', '/')} s",
            soft_wrap=True,
        )
        c.print(
            "crash mode the default (SENDDOCK_UNCONFIRMED=hold): a message whose final dot went"
            " just before the kill is held as unconfirmed, never sent again on its own; the demo"
            " then reads the server's log as you would read your relay's, and confirms or resends",
            soft_wrap=True,
        )
        conn = self.conn
        assert conn is not None
        audience, cid, bid, total = self._prepare(conn)
        if not self._send(conn, cid, bid, total):
            return 1
        return self._prove(conn, audience, bid)

    @contextlib.contextmanager
    def _step(self, what: str) -> Iterator[None]:
        try:
            yield
        except DemoFailed:
            raise
        except Exception as exc:
            raise DemoFailed(f"cannot start the {what}: {_first_line(exc)}") from exc

    def _start_database(self) -> None:
        if self.outside_db:
            self.db_url = str(self.settings.database_url)
            self.console.print(
                "database   SENDDOCK_DATABASE_URL (outside server; its other workers, if any,"
                " would take part)",
                soft_wrap=True,
            )
        else:
            with self.console.status("starting an embedded Postgres…"):
                self.pg = EmbeddedPostgres(self.tmp / "pg", delete=True)
                self.db_url = self.pg.start()
            self.console.print(
                f"database   embedded Postgres 18 in {self.tmp / 'pg'} (deleted on exit)",
                soft_wrap=True,
            )
        self.conn = connect(self.db_url)
        migrate(self.conn)

    def _start_smtp(self) -> None:
        if self.outside_smtp:
            self.smtp_url = self.settings.smtp_url
            t = SmtpTarget.parse(self.smtp_url)
            self.console.print(
                f"SMTP       SENDDOCK_SMTP_URL, {t.host}:{t.port} (outside server: the proof"
                " at the server is not available, rows only)",
                soft_wrap=True,
            )
            return
        self.catcher = Catcher().start()
        self.smtp_url = self.catcher.url
        self.console.print(
            f"SMTP       catcher on 127.0.0.1:{self.catcher.port}"
            " (bounce-* → 550 5.1.1, flaky-* → 451 twice, then accepted)",
            soft_wrap=True,
        )

    def _prepare(self, conn: Conn) -> tuple[Audience, int, int, int]:
        """Import the subscribers, create the campaign and enqueue it."""
        token = os.urandom(3).hex()
        # On an outside database, this run's addresses and list must not meet an earlier run's.
        domain = f"demo-{token}.example.com" if self.outside_db else "example.com"
        list_name = f"demo-{token}" if self.outside_db else "demo"
        audience = make_audience(self.count, domain)
        csv_path = self.tmp / "subscribers.csv"
        csv_path.write_text(write_csv(audience.rows), encoding="utf-8")
        t0 = time.monotonic()
        report = import_csv(conn, csv_path, list_name)
        ordinary = report.imported - len(audience.bounce) - len(audience.flaky)
        self._done(
            f"imported {report.imported:,} subscribers from {csv_path.name}:"
            f" {len(audience.bounce):,} bounce-*, {len(audience.flaky):,} flaky-*,"
            f" {ordinary:,} ordinary ({time.monotonic() - t0:.1f} s)"
        )
        if report.rejected:
            raise DemoFailed(f"the import rejected {len(report.rejected)} generated rows")
        cid = create_campaign(
            conn,
            name=f"SendDock demo {token}",
            list_name=list_name,
            subject=SUBJECT,
            from_addr=FROM,
            text_body=TEXT,
            html_body=HTML,
        )
        bid, total, _ = broadcast(conn, cid)
        total += enqueue_all(conn, bid)  # all of it now, so the progress has its real total
        self._done(f"campaign {cid} enqueued as broadcast {bid}: {total:,} jobs")
        sample = SUBJECT.replace("{{ subscriber.name }}", audience.rows[0][1])
        self.console.print(
            f"  subject {SUBJECT!r}, e.g. {sample!r}",
            soft_wrap=True,
        )
        return audience, cid, bid, total

    # -- sending, with a crash ----------------------------------------------------------------

    def _worker_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SENDDOCK_DATABASE_URL=self.db_url,
            SENDDOCK_SMTP_URL=self.smtp_url,
            SENDDOCK_RETRY_SCHEDULE=DEMO_RETRIES,
            # A test setup: addresses at reserved domains are accepted (audience/addresses.py).
            SENDDOCK_ALLOW_RESERVED_DOMAINS="1",
        )
        # The default crash mode (hold), whatever the caller's environment says: a job whose
        # final dot went before the SIGKILL is unconfirmed, for a person to decide (_settle).
        env.pop("SENDDOCK_UNCONFIRMED", None)
        return env
        return env

    def _start_worker(self) -> WorkerProcess:
        name = f"worker-{len(self.workers) + 1}"
        proc = WorkerProcess.start(
            self._worker_env(),
            log=self.tmp / f"{name}.log",
            name=name,
            concurrency=CONCURRENCY,
            own_session=True,  # Ctrl-C reaches the demo only; the demo stops it
        )
        self.workers.append(proc)
        return proc

    def _send(self, conn: Conn, cid: int, bid: int, total: int) -> bool:
        """Send with a real worker, SIGKILL it at ~40 %, start another; True once all is sent."""
        timeout = 90.0 + total * 0.05
        deadline = time.monotonic() + timeout
        kill_at = max(1, int(total * KILL_AT))
        worker = self._start_worker()
        self._note(f"worker pid {worker.pid} started ({CONCURRENCY} senders)")
        kill: Kill | None = None
        t0 = time.monotonic()
        progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "sent [green]{task.fields[sent]}[/] failed [red]{task.fields[failed]}[/]"
                " retry [yellow]{task.fields[retry]}[/] sending {task.fields[sending]}"
            ),
            TimeElapsedColumn(),
            console=self.console,
        )
        with progress:
            task = progress.add_task("sending", total=total, sent=0, failed=0, retry=0, sending=0)
            while True:
                st = status(conn, cid)
                c = st.counts
                progress.update(
                    task,
                    completed=c.sent + c.failed,
                    sent=c.sent,
                    failed=c.failed,
                    retry=c.retry,
                    sending=c.sending,
                )
                if st.status == "sent":
                    break
                if c.waiting_for_decision:
                    self._settle(conn, progress.console.print, cid, bid)
                if st.status == "paused":
                    raise DemoFailed(f"the broadcast paused: the relay said {st.pause_reason}")
                if not worker.alive():
                    self._show_log(worker)
                    code = worker.returncode
                    raise DemoFailed(f"worker pid {worker.pid} exited with code {code}")
                if kill is None and c.sent >= kill_at:
                    kill = self._kill(conn, progress.console.print, worker, bid, c.sent, total)
                    self.kill = kill
                    worker = self._start_worker()
                    self._note(
                        f"worker pid {worker.pid} started: it finds pid {kill.pid} gone and its"
                        " lock free, so it may rescue what that worker held",
                        progress.console.print,
                    )
                    if kill.in_flight:
                        kill.rescued_after = time.monotonic()
                elif kill is not None and kill.rescued_after is not None:
                    self._watch_rescue(conn, progress.console.print, kill)
                if time.monotonic() > deadline:
                    self._show_log(worker)
                    raise DemoFailed(
                        f"the campaign was not sent after {timeout:.0f} s"
                        f" ({c.sent:,} sent, {c.failed:,} failed of {total:,})"
                    )
                time.sleep(POLL)
        self._done(f"campaign {cid} is sent: every job finished in {time.monotonic() - t0:.1f} s")
        self._stop_worker(worker)
        return True

    def _kill(
        self,
        conn: Conn,
        say: Callable[..., None],
        worker: WorkerProcess,
        bid: int,
        sent: int,
        total: int,
    ) -> Kill:
        """SIGKILL the worker, then show what it left in `sending`."""
        worker.kill()  # and reap it, so no zombie looks alive to the rescuer
        row = conn.execute(
            QUERIES["worker_of_pid"],
            (worker.pid, socket.gethostname()),
        ).fetchone()
        worker_id = int(row["id"]) if row else None
        held = self._held(conn, bid, worker_id)
        kill = Kill(worker.pid, worker_id, len(held))
        say(
            f"[bold red]✗ SIGKILL worker pid {worker.pid} with {len(held)} messages in flight[/]"
            f" ({sent:,} of {total:,} sent)",
            soft_wrap=True,
        )
        time.sleep(PAUSE_AFTER_KILL)
        left = self._held(conn, bid, worker_id)
        say(
            f"  {len(left)} rows left in 'sending', owned by the dead worker: nobody touches them"
            " until its owner is known dead"
            if left
            else "  0 rows left in 'sending': it held none at that instant, nothing to rescue",
            soft_wrap=True,
        )
        if self.catcher is not None and left:
            at_server = self.catcher.count_by_rcpt()
            accepted = sum(1 for email in left if at_server[email] > 0)
            say(
                f"  {accepted} of them the server had already accepted, not yet recorded:"
                " their final dot went, so they will be unconfirmed, never sent again on their own"
                if accepted
                else "  none of them had been accepted by the server yet",
                soft_wrap=True,
            )
        self._wait_lock_released(conn, worker_id)
        return kill

    def _held(self, conn: Conn, bid: int, worker_id: int | None) -> list[str]:
        rows = conn.execute(
            QUERIES["held"],
            (bid, worker_id),
        ).fetchall()
        return [str(r["email"]) for r in rows]

    def _wait_lock_released(self, conn: Conn, worker_id: int | None, timeout: float = 5.0) -> None:
        """Wait until the dead worker's database session (and advisory lock) is gone."""
        if worker_id is None:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = conn.execute(
                QUERIES["lock_held"],
                (LOCK_CLASS, worker_id),
            ).fetchone()
            if row is None or int(row["n"]) == 0:
                return
            time.sleep(POLL)

    def _watch_rescue(self, conn: Conn, say: Callable[..., None], kill: Kill) -> None:
        assert kill.rescued_after is not None
        row = conn.execute(
            QUERIES["still_sending"],
            (kill.worker_id,),
        ).fetchone()
        if row is not None and int(row["n"]) == 0:
            took = time.monotonic() - kill.rescued_after
            found = conn.execute(QUERIES["unconfirmed_of"], (kill.worker_id,)).fetchone()
            held = int(found["n"]) if found else 0
            say(
                f"  [green]✓[/] rescued: the {kill.in_flight} rows of dead pid {kill.pid}:"
                f" {held} unconfirmed (their final dot had gone), the rest back in retry with"
                f" their attempt given back ({took:.1f} s after the restart)",
                soft_wrap=True,
            )
            kill.rescued_after = None

    def _settle(self, conn: Conn, say: Callable[..., None], cid: int, bid: int) -> None:
        """All that is left is unconfirmed: look each one's Message-ID up in the server's log
        (the catcher's; with an outside server there is none to read, so all go again), then
        `campaign confirm --job` the ones it has and `campaign resend-unconfirmed --job` the rest,
        as the README tells a person to do."""
        jobs = unconfirmed_jobs(conn, bid, limit=10_000)
        seen = (
            {r.message_id for r in self.catcher.received() if r.message_id}
            if self.catcher is not None
            else set()
        )
        went = [u.id for u in jobs if u.message_id in seen]
        again = [u.id for u in jobs if u.message_id not in seen]
        where = "the catcher's log" if self.catcher is not None else "no log (outside server)"
        say(
            f"[yellow]?[/] {len(jobs)} unconfirmed left (final dot sent by dead pid, no outcome):"
            f" by {where}, {len(went)} went and {len(again)} did not",
            soft_wrap=True,
        )
        confirmed = confirm(conn, cid, went) if went else 0
        resent = resend_unconfirmed(conn, cid, again) if again else 0
        if self.kill is not None:
            self.kill.confirmed += confirmed
            self.kill.resent += resent
        self._done(
            f"senddock campaign confirm {cid} --job …: {confirmed} confirmed sent;"
            f" senddock campaign resend-unconfirmed {cid} --job …: {resent} sent again",
            say,
        )

    def _stop_worker(self, proc: WorkerProcess, grace: float = 10.0) -> None:
        if proc.alive():
            proc.stop(grace)  # SIGKILLed if it outlives the grace

    def _show_log(self, proc: WorkerProcess) -> None:
        lines = proc.text().splitlines()[-15:]
        if lines:
            self.console.print(f"[dim]last lines of worker pid {proc.pid}'s log:[/]")
            for line in lines:
                self.console.print(f"  [dim]{escape(line)}[/]", soft_wrap=True)

    # -- the proof ---------------------------------------------------------------------------

    def _prove(self, conn: Conn, audience: Audience, bid: int) -> int:
        """Print the counts and the proof; 0 if every check holds."""
        rows: dict[str, dict[str, Any]] = {
            str(r["email"]).lower(): r
            for r in conn.execute(
                QUERIES["outcomes"],
                (bid,),
            ).fetchall()
        }
        suppressed = {
            str(r["email"])
            for r in conn.execute(
                QUERIES["suppressed"],
                (bid,),
            ).fetchall()
        }
        proof = (
            at_server(self.catcher.received(), audience.deliverable)
            if self.catcher is not None
            else None
        )
        self.console.print(self._table(audience, rows, suppressed, proof))
        checks = [self._delivered(audience, rows, proof)]
        if proof is not None:
            checks.append(self._duplicates(proof))
            checks.append(self._bounced(audience, suppressed, proof))
            checks.append(self._retried(audience, rows, proof))
        else:
            self.console.print(
                "[yellow]The proof at the SMTP server is not available with an outside"
                " SENDDOCK_SMTP_URL: row counts only.[/]",
                soft_wrap=True,
            )
        self.console.rule("[bold]THE PROOF")
        for ok, text in checks:
            mark = "[green]✓[/]" if ok else "[bold red]✗[/]"
            self.console.print(f"{mark} {text}", soft_wrap=True)
        elapsed = time.monotonic() - self.started
        if all(ok for ok, _ in checks):
            claim = (
                "nobody dropped, bounces suppressed, every duplicate recognisable"
                if self.catcher is not None
                else "every job finished and no recipient was dropped, by the rows"
            )
            self.console.print(
                f"[bold green]PROOF HOLDS[/]: {claim} ({elapsed:.1f} s in all)", soft_wrap=True
            )
            return 0
        self.console.print("[bold red]PROOF FAILED[/]: see the lines marked ✗", soft_wrap=True)
        return 1

    def _table(
        self,
        audience: Audience,
        rows: dict[str, dict[str, Any]],
        suppressed: set[str],
        proof: Proof | None,
    ) -> Table:
        by_status: Counter[str] = Counter(
            str(r["status"]) + (f": {r['failure']}" if r["failure"] else "") for r in rows.values()
        )
        table = Table(title="Counts", header_style="bold")
        table.add_column("")
        table.add_column("rows", justify="right")
        table.add_column("at the SMTP server", justify="right")
        table.add_row("subscribers", f"{len(audience.rows):,}", "")
        table.add_row("jobs", f"{len(rows):,}", "")
        for key, n in sorted(by_status.items(), key=lambda kv: (kv[0] != "sent", kv[0])):
            server = ""
            if proof is not None and key == "sent":
                server = f"{proof.messages:,} messages"
            elif proof is not None and key == "failed: bounced":
                server = f"{sum(proof.count(e) for e in audience.bounce):,} received"
            table.add_row(key, f"{n:,}", server)
        if proof is not None:
            table.add_row("distinct recipients", "", f"{len(proof.copies):,}")
        table.add_row("suppressed (bounces)", f"{len(suppressed):,}", "")
        if self.kill is not None:
            table.add_row(
                f"rescued from SIGKILLed pid {self.kill.pid}", f"{self.kill.in_flight:,}", ""
            )
            table.add_row("  unconfirmed, confirmed sent", f"{self.kill.confirmed:,}", "")
            table.add_row("  unconfirmed, sent again", f"{self.kill.resent:,}", "")
        return table

    def _delivered(
        self, audience: Audience, rows: dict[str, dict[str, Any]], proof: Proof | None
    ) -> tuple[bool, str]:
        """Every deliverable recipient delivered: at the server if we have it, else in rows."""
        deliverable = audience.deliverable
        sent_rows = {e for e, r in rows.items() if r["status"] == "sent"}
        unfinished = sum(1 for r in rows.values() if r["status"] not in ("sent", "failed"))
        if proof is not None:
            delivered, where = proof.delivered, "at the server"
        else:
            # Without the catcher a bounce-* address may be accepted: a recipient is undelivered
            # when its job neither was sent nor bounced.
            bounced = {e for e, r in rows.items() if r["failure"] == "bounced"}
            deliverable = frozenset(rows) - (bounced - sent_rows)
            delivered, where = deliverable & sent_rows, "in the rows"
        undelivered = len(deliverable - delivered)
        ok = undelivered == 0 and unfinished == 0 and deliverable <= sent_rows
        return (
            ok,
            f"delivered {where}: {len(delivered):,} of {len(deliverable):,} deliverable"
            f" recipients; undelivered: {undelivered}",
        )

    def _bounced(self, audience: Audience, suppressed: set[str], proof: Proof) -> tuple[bool, str]:
        received = sum(proof.count(e) for e in audience.bounce)
        return (
            suppressed == set(audience.bounce) and received == 0,
            f"bounced: {len(suppressed):,} of {len(audience.bounce):,} bounce-* addresses"
            f" suppressed; received at the server: {received}",
        )

    def _retried(
        self, audience: Audience, rows: dict[str, dict[str, Any]], proof: Proof
    ) -> tuple[bool, str]:
        # Counted at the server when the demo runs its own: a job held at the SIGKILL gets its
        # attempt back (it may never have been tried), so a row can count one try less than
        # the server saw, for a message whose 451 came just before the kill.
        tried = self.catcher.attempts_by_rcpt if self.catcher is not None else None

        def attempts(e: str) -> int:
            return tried[e.lower()] if tried is not None else int(rows[e]["attempts"])

        retried = [
            e
            for e in audience.flaky
            if proof.count(e) >= 1 and rows[e]["status"] == "sent" and attempts(e) >= 3
        ]
        most = max((attempts(e) for e in audience.flaky), default=0)
        return (
            len(retried) == len(audience.flaky),
            f"retried: {len(retried):,} of {len(audience.flaky):,} flaky-* delivered after"
            f" >= 3 attempts each (most: {most})",
        )

    def _duplicates(self, proof: Proof) -> tuple[bool, str]:
        """Recipients received more than once, and whether each got one Message-ID only."""
        dups = proof.extra
        if not dups:
            why = ""
            if self.kill is not None and self.kill.confirmed:
                why = (
                    f" ({self.kill.confirmed} accepted at the kill were held unconfirmed and"
                    " confirmed, not sent again)"
                )
            elif self.kill is not None:
                why = " (no message in flight at the kill had been accepted)"
            return True, f"duplicates: 0{why}"
        same = not proof.mixed_ids
        example = min(dups)
        return (
            same,
            f"duplicates: {len(dups)} (in flight at the kill), same Message-ID:"
            f" {'yes' if same else 'NO'}; e.g. {example} got {proof.count(example)} × "
            f"{next(iter(proof.message_ids(example)))}",
        )

    # -- output and cleanup ------------------------------------------------------------------

    def _done(self, text: str, say: Callable[..., None] | None = None) -> None:
        (say or self.console.print)(f"[green]✓[/] {text}", soft_wrap=True)

    def _note(self, text: str, say: Callable[..., None] | None = None) -> None:
        (say or self.console.print)(f"[cyan]▶[/] {text}", soft_wrap=True)

    def close(self) -> None:
        """Stop every worker, the catcher and Postgres; delete the temp dir. Never raises."""
        for proc in self.workers:
            with contextlib.suppress(Exception):
                self._stop_worker(proc, grace=5.0)
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
        if self.catcher is not None:
            with contextlib.suppress(Exception):
                self.catcher.stop()
        if self.pg is not None:
            with contextlib.suppress(Exception):
                self.pg.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _signals(handler: Callable[[int, FrameType | None], Any] | int) -> Iterator[None]:
    """Route SIGINT and SIGTERM to `handler` for the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in before:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in before.items():
            if old is not None:
                signal.signal(sig, old)


def run_demo(count: int) -> int:
    """Run the demo with `count` subscribers; 0 if the proof holds, 1 if not, 130 on Ctrl-C."""
    console = Console(highlight=False)
    demo = Demo(console, count)
    code = 1
    try:
        with _signals(_interrupt):  # SIGTERM cleans up like Ctrl-C does
            code = demo.run()
    except KeyboardInterrupt:
        console.print("\n[yellow]interrupted[/]: stopping the workers, catcher and Postgres")
        code = 130
    except DemoFailed as exc:
        console.print(f"[bold red]demo failed[/]: {escape(str(exc))}", soft_wrap=True)
        code = 1
    except (psycopg.Error, OSError) as exc:
        console.print(f"[bold red]demo failed[/]: {escape(_first_line(exc))}", soft_wrap=True)
        code = 1
    finally:
        with _signals(signal.SIG_IGN):  # a second Ctrl-C must not leave Postgres running
            demo.close()
    return code
