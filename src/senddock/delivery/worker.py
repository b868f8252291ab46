"""One worker process: its lease, its senders, its recorder and the duties of its maintainer.

The senders (delivery/sender.py) share the process's state, one small object per concern
(delivery/state.py). Which duties the maintainer runs beside the heartbeat and the listener
(rescuer, finisher, cleaner, scheduler, enqueuers) and how a message is composed are decided by
the process's composer, senddock/runtime.py: delivery/ imports nothing from campaigns/.
"""

from __future__ import annotations

import asyncio
import logging
import time

from psycopg import sql as pgsql

from senddock import queue
from senddock.config import Settings, SmtpTarget
from senddock.db import sql
from senddock.delivery import dotlog, processes, rescuer
from senddock.delivery.link import Link
from senddock.delivery.maintainer import Maintainer, Service
from senddock.delivery.ratelimit import RateLimiter
from senddock.delivery.recorder import Recorder
from senddock.delivery.sender import Alarm, OutcomeNotWritten, Sender, summary
from senddock.delivery.servers import ServerPool
from senddock.delivery.state import Claims, Compose, Control, Lease, Messages, Relays, Tally
from senddock.queue import NOTIFY_CHANNEL, AsyncConn

log = logging.getLogger("senddock.worker")

QUERIES = sql.load(__package__, "worker.sql")
# LISTEN takes a channel name, not a parameter: the one channel, written in as an identifier.
LISTEN = pgsql.SQL(QUERIES["listen"]).format(channel=pgsql.Identifier(NOTIFY_CHANNEL))


class Heartbeat(Service):
    """Keep the lease: beat with the database clock; re-take the lock after reconnecting."""

    name = "heartbeat"

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.period = worker.settings.heartbeat_interval
        self._needs_lock = False
        self._marked_stopping = False

    async def run_once(self, conn: AsyncConn) -> float | None:
        w = self.worker
        if w.control.stopping.is_set() and not self._marked_stopping:
            await rescuer.mark_stopping(conn, w.lease.worker_id)
            self._marked_stopping = True
        if not await rescuer.heartbeat(conn, w.lease.worker_id):
            await w._declared_dead()
            return 0.0
        if self._needs_lock:
            await rescuer.relock(conn, w.lease.worker_id)
            self._needs_lock = False
            w.lease.grant_grace()
        w.lease.acknowledged = time.monotonic()
        return None

    def reconnected(self) -> None:
        self._needs_lock = True


class Listener(Service):
    """Wake idle senders when a broadcast is enqueued or resumed (LISTEN/NOTIFY)."""

    name = "listener"
    period = 0.5

    def __init__(self, control: Control) -> None:
        self.control = control

    async def run_once(self, conn: AsyncConn) -> float | None:
        await conn.execute(LISTEN)
        async for note in conn.notifies():
            if note.payload.startswith("stop:"):
                # Paused or cancelled: senders give back what they have not started.
                self.control.stopped.add(int(note.payload[5:]))
            self.control.wake.set()
        return 0.0


class Finisher(Service):
    """Mark finished the broadcasts with no job left to send, on the maintenance period."""

    name = "finisher"

    def __init__(self, period: float) -> None:
        self.period = period

    async def run_once(self, conn: AsyncConn) -> float | None:
        await queue.finish(conn)
        return None


def maintenance_period(settings: Settings) -> float:
    """How often the rescuer, the finisher and a worker's scheduler run: a third of a lease,
    between 0.5 and 5 s."""
    return max(0.5, min(settings.lease_seconds / 3, 5.0))


class Worker:
    """One worker process: registers, rescues the dead, runs its senders until told to stop."""

    def __init__(
        self, settings: Settings, url: str, concurrency: int = 5, *, compose: Compose
    ) -> None:
        self.settings = settings
        self.url = url
        self.concurrency = concurrency
        self.ident = rescuer.Identity.current()
        targets = SmtpTarget.parse_all(settings.smtp_url)
        self.lease = Lease(settings.lease_seconds)
        self.control = Control()
        self.claims = Claims(self.control)
        self.relays = Relays(ServerPool(targets, probe_timeout=settings.smtp_timeout + 5))
        self.messages = Messages(compose)
        self.tally = Tally()
        # One connection takes the permits of every rate-limited server: permits come in
        # batches, so at most about 20 statements a second per server.
        self.permits = Link(url, self.control.stopping.is_set)
        for t in targets:
            if t.limited:
                limiter = RateLimiter(t, self.permits, self.control.stopping)
                self.relays.limiters[t.name] = limiter
        self.hb = Link(url, self.control.stopping.is_set)
        # Made at `run()`, in the process that sends (a supervisor forks workers first).
        self.dots: dotlog.DotLog | dotlog.NoDotLog = dotlog.NoDotLog()
        # The process's background duties: its own two here, the rest added by its composer
        # (senddock/runtime.py: rescuer, finisher, cleaner, scheduler, enqueuers, imports).
        self.maintainer = Maintainer(url, self.control.stopping.is_set)
        self.maintainer.add(Heartbeat(self), link=self.hb)
        self.maintainer.add(Listener(self.control))

    @property
    def worker_id(self) -> int:
        return self.lease.worker_id

    def _owner(self) -> int:
        return self.lease.worker_id

    def stop(self) -> None:
        self.control.stop()

    async def _register(self) -> None:
        conn = await self.hb.conn()
        self.lease.worker_id = await rescuer.register(
            conn, self.ident, self.concurrency, self.dots.path
        )
        self.lease.acknowledged = time.monotonic()
        self.lease.declared_dead = False

    async def _supervisor_loop(self, duties: asyncio.Task[None]) -> None:
        """Tell the supervisor (`--processes`) this process is alive: its event loop runs and
        its duties with it (the heartbeat among them). A database outage does not stop the
        beats; a loop stuck in one job's code, or duties that ended, does, and the supervisor
        replaces us."""
        processes.announce(self.lease.seconds)
        while not duties.done():
            processes.beat()
            await asyncio.sleep(1.0)

    async def _declared_dead(self) -> None:
        """A peer declared us dead (we lost our lease): drop every claim, join again anew."""
        log.error("worker %s was declared dead by a peer; dropping claims", self.lease.worker_id)
        self.lease.declared_dead = True
        while self.claims.jobs:
            await asyncio.sleep(0.05)
        await self.hb.close()
        await self._register()

    def _sender(self, index: int, recorder: Recorder) -> Sender:
        return Sender(
            index,
            self.settings,
            self.url,
            lease=self.lease,
            claims=self.claims,
            control=self.control,
            relays=self.relays,
            messages=self.messages,
            tally=self.tally,
            recorder=recorder,
            dots=self.dots,
        )

    async def run(self) -> int:
        """Run until stop(); return the process exit code."""
        Alarm.install()
        folder = dotlog.directory(self.settings.dot_log_dir)
        self.dots = dotlog.DotLog.create(folder, self.concurrency) or dotlog.NoDotLog()
        await self._register()
        conn = await self.hb.conn()
        hold = self.settings.unconfirmed == "hold"
        n = await rescuer.sweep(
            conn, self.lease.worker_id, self.ident, self.lease.seconds, hold=hold
        )
        # After the rescue at boot, which reads the dot logs of this host's dead workers.
        dotlog.remove_stale(folder, keep=self.dots.path)
        log.info(
            "worker %s started with %d senders; rescued %d jobs at boot",
            self.lease.worker_id,
            self.concurrency,
            n,
        )
        duties = asyncio.create_task(self.maintainer.run())
        background = [duties, asyncio.create_task(self._supervisor_loop(duties))]
        # A group commits when every sender has an outcome in it, or one sender needs its own.
        link = Link(self.url, self.control.stopping.is_set)
        recorder = Recorder(link, self._owner, full=self.concurrency)
        # Not in `background`: it must outlive every sender, which waits on it.
        recording = asyncio.create_task(recorder.run())
        senders = [
            asyncio.create_task(self._sender(i, recorder).run()) for i in range(self.concurrency)
        ]
        failed: str | None = None
        try:
            failed = await self._until_done(senders, background)
        except OutcomeNotWritten:
            # The recorder logged why. Stop, as a crash would, but say so and let peers (or
            # this worker's next start) rescue the jobs now rather than after the lease.
            log.error("stopping: outcomes can no longer be written; held jobs will be rescued")
            failed = "stopped: an outcome could not be written (see the worker's log)"
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            for task in senders:
                task.cancel()
            await asyncio.gather(*senders, return_exceptions=True)
            recording.cancel()
            await asyncio.gather(recording, return_exceptions=True)
            log.info("recorded %d outcomes in %d commits", recorder.written, recorder.groups)
        deregistered = False
        try:
            # Bounded: with the database gone, peers (or our replacement) will rescue instead.
            async with asyncio.timeout(10):
                await self.hb.retrying(queue.finish)
                await self.hb.retrying(
                    lambda c: rescuer.deregister(c, self.lease.worker_id, failed)
                )
                deregistered = True
        except TimeoutError:
            log.warning(
                "could not deregister worker %s: database unreachable", self.lease.worker_id
            )
        finally:
            await self.hb.close()
            await self.permits.close()
            # Deregistered, it holds nothing left to rescue; else its rescuer reads the log.
            self.dots.close(remove=deregistered)
        log.info("worker %s stopped after %d messages sent", self.lease.worker_id, self.tally.sent)
        return 1 if failed else 0

    async def _until_done(
        self, senders: list[asyncio.Task[None]], background: list[asyncio.Task[None]]
    ) -> str | None:
        """Wait for the senders to end (after stop()); None, or why the worker must stop now.

        A background task (the maintainer, whose duties are the heartbeat, the rescuer, the
        listener, the enqueuers...) runs for as long as the worker does: one that ends with an
        error would leave a process that looks alive but keeps no lease or rescues nobody, so
        it stops the worker instead, with the reason."""
        everything = {*senders, *background}
        while True:
            done, _ = await asyncio.wait(everything, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                everything.discard(task)
                exc = None if task.cancelled() else task.exception()
                if isinstance(exc, OutcomeNotWritten):
                    raise exc
                if task in background and self.control.stopping.is_set() and exc is None:
                    continue  # a duty that ends with the worker
                if exc is not None or task in background:
                    what = "a sender" if task in senders else "a background task"
                    reason = summary(exc) if exc is not None else "ended"
                    log.error("stopping: %s failed: %s", what, reason, exc_info=exc)
                    self.stop()
                    return f"stopped: {what} failed: {reason}"
            if all(t.done() for t in senders):
                return None
