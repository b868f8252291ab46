"""How the processes are put together: what `senddock worker` and `senddock serve` run.

The one place that knows both campaigns/ and delivery/: a worker is delivery's senders,
recorder, heartbeat and listener (delivery/worker.py), given campaigns' way to compose a
broadcast's message, and a maintainer (delivery/maintainer.py) that runs its duties:

  rescuer    delivery/rescuer.py    rescue what dead peers held          a third of a lease
  finisher   delivery/worker.py     mark finished broadcasts             a third of a lease
  cleaner    delivery/cleaner.py    retention: freeze counts, purge;     every 60 s
                                    bounces' bytes past their days
  scheduler  here                   enqueue the due scheduled campaigns  a third of a lease
  enqueuer   here (PARTS of them)   carry broadcasts being enqueued      at once, or on NOTIFY
  imports    here                   run and resume the HTTP imports      a chunk at a time

`serve` runs the same maintainer with the scheduler (`--schedule-every`) and the imports, and a
worker beside them unless `--no-workers`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from typing import Any

import psycopg

from senddock.audience.import_jobs import Importer
from senddock.bounces.verp import ReturnPath
from senddock.campaigns import compose, scheduler
from senddock.campaigns.broadcast import PARTS, enqueue_chunk
from senddock.config import Settings
from senddock.delivery.cleaner import Cleaner
from senddock.delivery.maintainer import Maintainer, ThreadService
from senddock.delivery.rescuer import Rescuer
from senddock.delivery.state import Compose, Envelope
from senddock.delivery.worker import LISTEN, Finisher, Worker, maintenance_period
from senddock.messages import CompiledMessage, LinkSettings

log = logging.getLogger("senddock.worker")

Conn = psycopg.Connection[dict[str, Any]]


def composer(settings: LinkSettings, bounce_domain: str | None = None) -> Compose:
    """How a worker compiles a broadcast's message: templates, headers and the signed
    unsubscribe links (the settings' public URL, and the link key read when it is first sent),
    and with a bounce domain each job's VERP envelope sender."""
    path = ReturnPath.parse(bounce_domain) if bounce_domain else None

    async def compose_message(
        conn: psycopg.AsyncConnection[dict[str, Any]], broadcast_id: int
    ) -> tuple[CompiledMessage, Envelope] | None:
        return await compose.for_broadcast(conn, broadcast_id, settings, path)

    return compose_message


class Scheduler(ThreadService):
    """Enqueue every draft campaign whose send time has come (safe beside other schedulers:
    SKIP LOCKED makes exactly one enqueue it, campaigns/scheduler.py)."""

    name = "scheduler"

    def __init__(self, period: float, wake: asyncio.Event | None = None) -> None:
        self.period = period
        self.wake = wake

    def run_once(self, conn: Conn) -> float | None:
        if self.wake is None:  # `serve`'s: an error is logged and the next pass tries again
            try:
                done = scheduler.run_due(conn)
            except psycopg.OperationalError:
                raise
            except Exception:
                log.warning("scheduler pass failed", exc_info=True)
                return None
            if done:
                log.info("scheduler enqueued campaigns %s", done)
        elif scheduler.run_due(conn):
            self.call_in_loop(self.wake.set)
        return None


class Enqueuer(ThreadService):
    """Carry every broadcast being enqueued to its end, chunk by chunk (campaigns/broadcast.py).

    Each chunk commits on its own, so stopping between two loses nothing; with nothing to do it
    waits for a NOTIFY, or `period` seconds. Senders are woken after each chunk with jobs."""

    name = "enqueuer"
    period = 1.0

    def __init__(self, stopping: asyncio.Event, wake: asyncio.Event, size: int) -> None:
        self.stopping = stopping
        self.wake = wake
        self.size = size
        self._listening: Conn | None = None

    def run_once(self, conn: Conn) -> float | None:
        if self.stopping.is_set():
            return None
        if conn is not self._listening:
            conn.execute(LISTEN)
            self._listening = conn
        chunk = enqueue_chunk(conn, None, self.size)
        if chunk is None:
            for _ in conn.notifies(timeout=self.period, stop_after=1):
                pass
        elif chunk.jobs:
            self.call_in_loop(self.wake.set)
        return 0.0


class Imports(ThreadService):
    """Run the HTTP imports: those queued, and those a dead process was running, resumed
    (audience/import_jobs.py). A chunk a pass, so that stopping waits for one chunk at most."""

    name = "imports"
    period = 0.5

    def __init__(self) -> None:
        self.importer = Importer()

    def run_once(self, conn: Conn) -> float | None:
        return 0.0 if self.importer.run_once(conn) else None


def build_worker(
    settings: Settings,
    url: str,
    concurrency: int,
    compose: Compose | None = None,
    *,
    imports: bool = True,
) -> Worker:
    """A worker with every duty of `senddock worker` (`serve` runs the imports itself)."""
    worker = Worker(
        settings, url, concurrency, compose=compose or composer(settings, settings.bounce_domain)
    )
    period = maintenance_period(settings)
    control = worker.control
    duties = worker.maintainer
    hold = settings.unconfirmed == "hold"
    duties.add(Rescuer(worker.lease, worker.ident, control.wake, period, hold=hold))
    duties.add(Finisher(period))
    duties.add(Cleaner(settings.retention_days, raw_days=settings.bounce_raw_days))
    # Every worker also runs the scheduler; SKIP LOCKED makes exactly one enqueue.
    duties.add(Scheduler(period, control.wake))
    # Broadcasts still being enqueued: their next chunks, PARTS at a time (broadcast.py).
    for _ in range(PARTS):
        duties.add(Enqueuer(control.stopping, control.wake, settings.enqueue_chunk))
    if imports:
        duties.add(Imports())
    return worker


def serve_maintainer(url: str, schedule_every: float) -> Maintainer:
    """The duties `senddock serve` runs beside its pages: the scheduler (every
    `schedule_every` seconds; 0: none) and the imports."""
    duties = Maintainer(url, lambda: False)
    if schedule_every > 0:
        duties.add(Scheduler(schedule_every))
    duties.add(Imports())
    return duties


def run_worker(settings: Settings, url: str, concurrency: int) -> int:
    """Run a worker in this process until SIGTERM or SIGINT; graceful on the first.

    A second signal exits at once: an outcome that could not be written yet (database gone)
    is then left to the rescuer, and its message may be sent again.
    """

    async def main() -> int:
        worker = build_worker(settings, url, concurrency)
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            if worker.control.stopping.is_set():
                log.error("second signal: exiting now without waiting for outcomes")
                os._exit(1)
            log.info("stopping: finishing messages in flight, giving back the rest")
            worker.stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        return await worker.run()

    try:
        import uvloop

        return uvloop.run(main())
    except ImportError:
        return asyncio.run(main())
