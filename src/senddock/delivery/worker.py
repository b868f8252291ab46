"""`senddock worker`: N concurrent senders in one process, plus its heartbeat and rescuer.

Each sender sends one message at a time, over one SMTP session per server it uses: each message
picks its server by weight among the healthy ones (delivery/servers.py) and waits for that
server's rate-limit permit before MAIL FROM (delivery/ratelimit.py). It claims a small batch,
and for each job renders and sends outside any transaction, then hands the outcome to the
process's recorder (delivery/recorder.py), which commits the outcomes of all senders in groups.
A sender goes on with its next message at once, but that message's final dot waits until the
previous outcome is committed, so a sender (and so each session) never has two accepted,
unrecorded messages (invariant 3); its envelope's round trips overlap that commit. To a relay
that takes a millisecond or more to answer a final dot, the next job's envelope goes out with
that dot when the job will surely follow on the same session (same broadcast and server, and
a rate-limit permit in hand for it): one round trip a message instead of two (delivery/smtp.py);
a sender claims its next batch before the last message of a batch, so that holds across batches.
Database faults are retried with backoff; an outcome whose commit was not acknowledged is read
back before it is written again.

One recipient's data never costs another anything: whatever goes wrong while preparing or
sending one job (an address the relay cannot take, a name or attribute a template chokes on,
a bug) is that job's outcome, `rejected` with the reason, logged once with its traceback. A
process that dies anyway gives its jobs back as suspects (senddock/queue/jobs.sql, rescue), and
holds at most one suspect at a time, so a job that kills its worker fails alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import psycopg

from senddock import queue
from senddock.campaigns import compose, scheduler
from senddock.campaigns.broadcast import run_enqueuer
from senddock.config import Settings, SmtpTarget
from senddock.delivery import processes, rescuer
from senddock.delivery.cleaner import Cleaner
from senddock.delivery.link import Link, Stopped, one_line
from senddock.delivery.outcome import SENDER_STAGES, Reply, Verdict, judge, transition
from senddock.delivery.ratelimit import LONG_WAIT, UNMETERED, Permit, RateLimiter
from senddock.delivery.recorder import Recorder
from senddock.delivery.servers import CONNECTION_STAGES, ServerPool, connection_failed
from senddock.delivery.smtp import SmtpSession
from senddock.messages import CompiledMessage, LinkSettings, Recipient, TemplateProblem
from senddock.messages.render import RENDER_SECONDS, reset_clock
from senddock.queue import NOTIFY_CHANNEL, PARTS, Job, Outcome

log = logging.getLogger("senddock.worker")


@dataclass
class Shared:
    """What the senders of one process share. Nothing here needs to survive a crash."""

    settings: Settings
    servers: ServerPool
    url: str
    # Rate limits of the servers that have any, by server name (delivery/ratelimit.py).
    limiters: dict[str, RateLimiter] = field(default_factory=dict)
    worker_id: int = 0
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    # Liveness self-fence: monotonic time of the last heartbeat the database acknowledged.
    heartbeat_ok: float = field(default_factory=time.monotonic)
    declared_dead: bool = False
    held: set[int] = field(default_factory=set)
    # The one suspect this process holds, if any (a job a dead worker held: jobs.sql, rescue).
    suspect: int | None = None
    claim_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    compiled: dict[int, tuple[CompiledMessage, str]] = field(default_factory=dict)
    faults_in_row: dict[int, int] = field(default_factory=dict)
    paused: set[int] = field(default_factory=set)
    sent: int = 0
    # Until then (monotonic), judge no peer dead by a lapsed lease: we were cut off ourselves.
    lapse_grace_until: float = 0.0

    def fresh(self) -> bool:
        """May this process start a message? Only while its lease is surely still held."""
        age = time.monotonic() - self.heartbeat_ok
        return not self.declared_dead and age < self.settings.lease_seconds / 2


@dataclass(frozen=True)
class Prepared:
    """The batch's next job, prepared at the final dot before it: the server picked for it
    then, and the permit taken for it if its envelope went with that dot (else None)."""

    job_id: int
    target: SmtpTarget
    permit: Permit | None


# Test hook: a job for this address SIGKILLs its worker as it is prepared, every time (the
# poison job of tests/test_poison.py and bench/chaos.py's `poison` scenario). Unset in use.
KILL_ON = os.environ.get("SENDDOCK_TEST_KILL_ON") or None


class OutcomeNotWritten(Exception):
    """An outcome the recorder could not write (not a lost connection, which it outlasts): no
    sender may send another final dot, so the worker stops and its jobs are rescued."""


class Unsent(enum.Enum):
    """Why a claimed job goes back without being sent."""

    STOP = "stop"  # stopping or declared dead: the rest of the batch goes back too
    PAUSED = "paused"  # its broadcast was paused while it waited for a permit


class Sender:
    """One concurrent sender: its SMTP sessions, and one message past its final dot at a time."""

    def __init__(self, shared: Shared, index: int, recorder: Recorder) -> None:
        self.s = shared
        self.index = index
        self.recorder = recorder
        self.db = Link(shared.url, shared.stopping.is_set)
        # One session per server this sender has used; each message picks its server.
        self.sessions: dict[str, SmtpSession] = {}
        self.connect_backoff = 0.0
        self.worked = False
        # The outcome last handed to the recorder. The next message's final dot waits for it
        # (invariant 3); its envelope (MAIL, RCPT, DATA) overlaps that commit.
        self.previous: asyncio.Future[bool] | None = None
        # The next job as `_ahead` prepared it at the last final dot.
        self.prepared: Prepared | None = None

    async def run(self) -> None:
        ahead: list[Job] | None = None  # the next batch, claimed before the last one ended
        try:
            while not self.s.stopping.is_set():
                if ahead is None and not self.s.fresh():
                    await asyncio.sleep(0.1)
                    continue
                jobs = ahead if ahead is not None else await self._claim()
                ahead = None
                if not jobs:
                    await self._settle()
                    if self.worked:
                        # The queue looks drained: mark finished broadcasts now, not at the next
                        # maintenance tick, so a campaign turns `sent` as soon as it is.
                        self.worked = False
                        with contextlib.suppress(Stopped):
                            await self.db.retrying(queue.finish, give_up_when_stopping=True)
                    await self._idle()
                    continue
                self.worked = True
                ahead = await self._send_batch(jobs)
        finally:
            try:
                await self._settle()
            finally:
                if ahead:
                    await self._give_back(ahead)
                for session in self.sessions.values():
                    await session.quit()
                await self.db.close()

    async def _settle(self) -> None:
        """Wait until the last outcome this sender handed over is written; OutcomeNotWritten
        if it could not be (then no other final dot may go: invariant 3)."""
        if self.previous is not None:
            previous, self.previous = self.previous, None
            await self._written(previous)

    async def _written(self, outcome: asyncio.Future[bool]) -> bool:
        """Once the recorder has answered for an outcome: was it written (False: claim lost)?"""
        if not outcome.done():
            self.recorder.need()
            await asyncio.wait([outcome])
        if outcome.cancelled() or outcome.exception() is not None:
            raise OutcomeNotWritten("the recorder could not write an outcome")
        return outcome.result()

    async def _claim(self) -> list[Job]:
        async with self.s.claim_lock:
            try:
                conn = await self.db.conn(give_up_when_stopping=True)
                n = self.s.settings.claim_batch
                # A process holds at most one suspect: if it dies, that one alone is charged.
                suspect = self.s.suspect is None
                jobs = await queue.claim(conn, self.s.worker_id, n, suspect=suspect)
            except Stopped:
                return []
            except psycopg.OperationalError as exc:
                # The claim may have committed with its reply lost: give back whatever this
                # process holds in the database but no sender knows about.
                # If we stop first they stay ours until our row is gone; then a peer rescues them.
                log.warning("claim interrupted (%s); releasing orphans", one_line(exc))
                await self.db.close()
                held = sorted(self.s.held)
                with contextlib.suppress(Stopped):
                    await self.db.retrying(
                        lambda c: queue.release_orphans(c, self.s.worker_id, held),
                        give_up_when_stopping=True,
                    )
                return []
            self.s.held.update(j.id for j in jobs)
            for j in jobs:
                if j.suspect:
                    self.s.suspect = j.id
            # The database said these broadcasts are running (resumed, if we had paused them).
            self.s.paused.difference_update(j.broadcast_id for j in jobs)
            return jobs

    async def _idle(self) -> None:
        self.s.wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.s.wake.wait(), timeout=0.5)

    async def _send_batch(self, jobs: list[Job]) -> list[Job] | None:
        """Send a claimed batch in order; the next batch, if this sender claimed it before
        the last message of this one (else None).

        That claim comes first so that the last message's final dot can carry the envelope
        of the next batch's first, as it does within a batch: to a far relay, one round trip
        a batch saved (delivery/smtp.py). Jobs claimed ahead and never started go back."""
        ahead: list[Job] | None = None
        for i, job in enumerate(jobs):
            if self.s.stopping.is_set() or self.s.declared_dead:
                await self._give_back(jobs[i:])
                return None
            if job.broadcast_id in self.s.paused:
                await self._give_back([job])
                continue
            following = jobs[i + 1] if i + 1 < len(jobs) else None
            if following is None and self.s.fresh():  # claim only as `run()` does
                ahead = await self._claim()
                following = ahead[0] if ahead else None
            reply = await self._deliver(job, following)
            if reply is Unsent.STOP:  # stopping, or declared dead, before it was sent
                await self._give_back(jobs[i:] + (ahead or []))
                return None
            if reply is Unsent.PAUSED:  # paused while it waited for a permit
                await self._give_back([job])
                continue
            verdict = judge(reply)
            await self._record(job, verdict, reply)
            if verdict is Verdict.TRANSIENT and reply.stage in SENDER_STAGES:
                await self._settle()
                # The relay is unreachable or refusing sessions: this job took the failure;
                # the rest of the batch goes back untouched while this sender backs off.
                await self._give_back(jobs[i + 1 :] + (ahead or []))
                self.connect_backoff = min(max(self.connect_backoff * 2, 0.5), 30.0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.s.stopping.wait(), self.connect_backoff)
                return None
            self.connect_backoff = 0.0
        return ahead

    async def _deliver(self, job: Job, following: Job | None) -> Reply | Unsent:
        """Render, pick a server, wait for its permit, send; or say why it goes back unsent.

        A server that cannot be reached is marked down and the job, never charged for it,
        goes at once to another server while one is usable; when none is, its failure stands.
        `following` is the next job (the batch's next, or the first of the batch claimed
        ahead), whose envelope may go with this one's final dot.
        """
        try:
            message, envelope_from = await self._compiled(job.broadcast_id)
        except TemplateProblem as exc:
            return Reply("render", 554, f"5.6.0 {exc}")
        prepared_data = _prepare(job, message)
        if isinstance(prepared_data, Reply):
            return prepared_data
        data = prepared_data
        tries = len(self.s.servers.targets)
        prepared, self.prepared = self.prepared, None
        if prepared is not None and prepared.job_id != job.id:
            self._give_back_permit(prepared.target, prepared.permit)  # its job did not come
            prepared = None
        while True:
            target = prepared.target if prepared else self.s.servers.pick()
            held = prepared.permit if prepared else None
            prepared = None
            session = self._session(target)
            reply = await session.open()
            if reply is not None:
                self._give_back_permit(target, held)
            else:
                unsent = await self._metered(target, session, job, held)
                if unsent is not None:
                    self.s.servers.settled(target.name)
                    return unsent
                then = None
                if following is not None and following.broadcast_id == job.broadcast_id:
                    then = functools.partial(self._ahead, target, following, envelope_from)
                try:
                    reply = await session.send(
                        envelope_from, job.email, data, before_dot=self._settle, then=then
                    )
                except OutcomeNotWritten:
                    raise
                except Exception as exc:  # a bug on one job's path: its outcome, not a crash
                    log.exception("job %s: sending failed; it fails as rejected", job.id)
                    session.close()  # whatever state the session was left in, start anew
                    return Reply("render", 554, f"5.3.0 not sent: {_summary(exc)}")
            if not connection_failed(reply):
                if reply.stage in CONNECTION_STAGES:
                    self.s.servers.settled(target.name)  # a 5xx about us: outcome.py judges it
                else:
                    self.s.servers.succeeded(target.name)
                return reply
            self.s.servers.failed(target.name, reply.summary())
            tries -= 1
            if tries <= 0 or not self.s.servers.any_usable():
                return reply
            log.warning(
                "SMTP server %s unreachable (%s); sending job %s via another",
                target.name,
                reply.summary(),
                job.id,
            )

    def _ahead(self, target: SmtpTarget, job: Job, envelope_from: str) -> tuple[str, str] | None:
        """At a final dot on `target`'s session: the envelope of `job`, next in the batch, to
        go with it, if `job` will surely be sent next on that session; else None.

        Its server is picked now (`_deliver` keeps the pick), and so is a rate-limited server's
        permit, if one is in hand; with none, the job waits for one as usual, its envelope not
        sent ahead. A job that goes back unsent after all (paused, stopping) only costs the
        session: it hangs up rather than end that envelope's DATA (delivery/smtp.py).
        """
        if self.s.stopping.is_set() or not self.s.fresh() or job.broadcast_id in self.s.paused:
            return None
        picked = self.s.servers.pick()
        permit = None
        if picked.name == target.name:
            limiter = self.s.limiters.get(target.name)
            permit = UNMETERED if limiter is None else limiter.take_now()
        self.prepared = Prepared(job.id, picked, permit)
        return None if permit is None else (envelope_from, job.email)

    def _give_back_permit(self, target: SmtpTarget, permit: Permit | None) -> None:
        limiter = self.s.limiters.get(target.name)
        if limiter is not None and permit is not None:
            limiter.give_back(permit)

    async def _metered(
        self, target: SmtpTarget, session: SmtpSession, job: Job, held: Permit | None = None
    ) -> Unsent | None:
        """Wait for the server's permit and for leave to start; None when MAIL FROM may go.

        `held`: the permit taken when this job's envelope went with the last final dot. A
        permit whose window ended meanwhile is void (its window counted it): take another.
        """
        limiter = self.s.limiters.get(target.name)
        if held is not None and held.valid():
            unsent = await self._may_start(job)
            if unsent is not None:
                self._give_back_permit(target, held)
            return unsent
        if limiter is None and self.s.fresh() and job.broadcast_id not in self.s.paused:
            return None  # the common case, without a wait
        while True:
            permit = UNMETERED
            if limiter is not None:
                waited = time.monotonic()
                taken = await limiter.take()
                if taken is None:
                    return Unsent.STOP
                permit = taken
                if time.monotonic() - waited > LONG_WAIT:
                    await session.quit()  # idle that long, the relay may have dropped it
            unsent = await self._may_start(job)
            if unsent is not None:
                if limiter is not None:
                    limiter.give_back(permit)
                return unsent
            if permit.valid():
                return None

    def _session(self, target: SmtpTarget) -> SmtpSession:
        session = self.sessions.get(target.name)
        if session is None:
            timeout = self.s.settings.smtp_timeout
            session = SmtpSession(target, timeout, verify_certs=target.verify)
            self.sessions[target.name] = session
        return session

    async def _may_start(self, job: Job) -> Unsent | None:
        """Wait until this process may start a message (its lease held); None when it may."""
        while not self.s.fresh():
            if self.s.declared_dead:
                return Unsent.STOP
            await asyncio.sleep(0.1)
        return Unsent.PAUSED if job.broadcast_id in self.s.paused else None

    async def _compiled(self, broadcast_id: int) -> tuple[CompiledMessage, str]:
        found = self.s.compiled.get(broadcast_id)
        if found is None:
            # Templates, headers and the signed unsubscribe links (SENDDOCK_PUBLIC_URL, key).
            links = LinkSettings()
            built = await self.db.retrying(lambda c: compose.for_broadcast(c, broadcast_id, links))
            if built is None:
                raise TemplateProblem(f"broadcast {broadcast_id} has no campaign")
            found = self.s.compiled[broadcast_id] = built
        return found

    async def _record(self, job: Job, verdict: Verdict, reply: Reply) -> None:
        st = self.s.settings
        if reply.stage == "render":
            verdict = Verdict.REJECTED
        t = transition(
            verdict, job.attempts, job.sender_faults, st.backoff, st.job_sender_fault_limit
        )
        written = self.previous = self.recorder.submit(Outcome(job, t, reply))
        written.add_done_callback(lambda done: self._recorded(job, t.status, verdict, done))
        if verdict is Verdict.SENDER_FAULT:
            if await self._written(written):
                await self._sender_fault(job.broadcast_id, reply)
        elif verdict is not Verdict.TRANSIENT or reply.stage not in SENDER_STAGES:
            self.s.faults_in_row.pop(job.broadcast_id, None)

    def _recorded(
        self, job: Job, status: str, verdict: Verdict, written: asyncio.Future[bool]
    ) -> None:
        """Once the recorder has answered for a job: it is no longer held, or its claim was lost.

        An outcome the recorder failed to write leaves the job held, `sending`: it was started,
        so it is never released as unstarted; the worker stops and it is rescued."""
        if written.cancelled() or written.exception() is not None:
            log.error("outcome of job %s (%s) not written; it will be rescued", job.id, status)
            return
        self._let_go(job.id)
        if not written.result():
            log.error(
                "claim on job %s was lost before its outcome (%s) was written", job.id, status
            )
        elif verdict is Verdict.SENT:
            self.s.sent += 1

    async def _sender_fault(self, broadcast_id: int, reply: Reply) -> None:
        """A reply about us: count it; after a few in a row, pause the broadcast."""
        n = self.s.faults_in_row.get(broadcast_id, 0) + 1
        self.s.faults_in_row[broadcast_id] = n
        reason = reply.summary()
        if n >= self.s.settings.sender_fault_limit:
            log.error("pausing broadcast %s after %d replies about us: %s", broadcast_id, n, reason)
            self.s.paused.add(broadcast_id)
            self.s.faults_in_row.pop(broadcast_id, None)
            await self.db.retrying(lambda c: queue.pause_for_sender_fault(c, broadcast_id, reason))
        else:
            await self.db.retrying(lambda c: queue.note_sender_fault(c, broadcast_id, reason))

    async def _give_back(self, jobs: list[Job]) -> None:
        if not jobs:
            return
        # Stopping with the database gone: leave them; they are rescued once we are known dead.
        with contextlib.suppress(Stopped):
            await self.db.retrying(
                lambda c: queue.release(c, self.s.worker_id, jobs), give_up_when_stopping=True
            )
        for j in jobs:
            self._let_go(j.id)

    def _let_go(self, job_id: int) -> None:
        """This process no longer holds `job_id` (written, or given back)."""
        self.s.held.discard(job_id)
        if self.s.suspect == job_id:
            self.s.suspect = None
            self.s.wake.set()  # the next suspect may be claimed: an idle sender takes it now


def _summary(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# The sandbox stops a render past RENDER_SECONDS at its next call, attribute or output; a loop
# that makes none (or one C call that runs long) is stopped by SIGALRM at twice that, in a
# worker's main thread (where Python runs signal handlers), as that job's outcome.
HARD_LIMIT = 2 * RENDER_SECONDS


class RenderTimeout(Exception):
    """A render stopped by the alarm."""


class _Alarm:
    armed = False
    installed = False

    @classmethod
    def install(cls) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGALRM, cls._ring)
            cls.installed = True

    @classmethod
    def _ring(cls, _signum: int, _frame: object) -> None:
        if cls.armed:
            cls.armed = False
            raise RenderTimeout(f"rendering took longer than {HARD_LIMIT:g} s")

    @classmethod
    @contextlib.contextmanager
    def limit(cls) -> Iterator[None]:
        if not cls.installed:
            yield
            return
        cls.armed = True
        signal.setitimer(signal.ITIMER_REAL, HARD_LIMIT)
        try:
            yield
        finally:
            cls.armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            reset_clock()


def _prepare(job: Job, message: CompiledMessage) -> bytes | Reply:
    """One job's message bytes, or the Reply that fails it: nothing about one recipient (its
    address, name, attributes, a template that fails for it alone) may stop the process."""
    if KILL_ON is not None and job.email == KILL_ON:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        attributes = json.loads(job.attributes)
        if not isinstance(attributes, dict):
            attributes = {}
        rcpt = Recipient(job.email, job.name, attributes, job.subscriber_id)
        with _Alarm.limit():
            return message.render(rcpt, job.message_id)
    except TemplateProblem as exc:
        log.warning("job %s not sent: %s", job.id, exc)
        return Reply("render", 554, f"5.6.0 {exc}")
    except Exception as exc:
        log.exception("job %s: its message could not be made; it fails as rejected", job.id)
        return Reply("render", 554, f"5.6.0 not sent: the message failed: {_summary(exc)}")


class Worker:
    """One worker process: registers, rescues the dead, runs its senders until told to stop."""

    def __init__(self, settings: Settings, url: str, concurrency: int = 5) -> None:
        self.settings = settings
        self.url = url
        self.concurrency = concurrency
        self.ident = rescuer.Identity.current()
        targets = SmtpTarget.parse_all(settings.smtp_url)
        pool = ServerPool(targets, probe_timeout=settings.smtp_timeout + 5)
        self.shared = Shared(settings=settings, servers=pool, url=url)
        # One connection takes the permits of every rate-limited server: permits come in
        # batches, so at most about 20 statements a second per server.
        self.permits = Link(url, self.shared.stopping.is_set)
        for t in targets:
            if t.limited:
                limiter = RateLimiter(t, self.permits, self.shared.stopping)
                self.shared.limiters[t.name] = limiter
        self.hb = Link(url, self.shared.stopping.is_set)

    def _owner(self) -> int:
        return self.shared.worker_id

    def stop(self) -> None:
        self.shared.stopping.set()
        self.shared.wake.set()

    async def _register(self) -> None:
        conn = await self.hb.conn()
        self.shared.worker_id = await rescuer.register(conn, self.ident, self.concurrency)
        self.shared.heartbeat_ok = time.monotonic()
        self.shared.declared_dead = False

    async def _heartbeat_loop(self) -> None:
        """Keep the lease: beat with the database clock; re-take the lock after reconnecting."""
        interval = self.settings.heartbeat_interval
        marked_stopping = False
        while True:
            try:
                conn = await self.hb.conn()
                if self.shared.stopping.is_set() and not marked_stopping:
                    await rescuer.mark_stopping(conn, self.shared.worker_id)
                    marked_stopping = True
                if not await rescuer.heartbeat(conn, self.shared.worker_id):
                    await self._declared_dead()
                    continue
                if self._needs_lock:
                    await rescuer.relock(conn, self.shared.worker_id)
                    self._needs_lock = False
                    self._grant_grace()
                self.shared.heartbeat_ok = time.monotonic()
            except psycopg.OperationalError as exc:
                log.warning("heartbeat failed (%s)", one_line(exc))
                await self.hb.close()
                self._needs_lock = True
            await asyncio.sleep(interval)

    async def _supervisor_loop(self, heartbeat: asyncio.Task[None]) -> None:
        """Tell the supervisor (`--processes`) this process is alive: its event loop runs and
        its heartbeat task with it. A database outage does not stop the beats; a loop stuck in
        one job's code, or a heartbeat task that ended, does, and the supervisor replaces us."""
        while not heartbeat.done():
            processes.beat()
            await asyncio.sleep(1.0)

    _needs_lock = False

    def _grant_grace(self) -> None:
        """We just got the database back: peers cut off with us get a full lease to return."""
        grace = time.monotonic() + self.settings.lease_seconds
        self.shared.lapse_grace_until = max(self.shared.lapse_grace_until, grace)

    async def _declared_dead(self) -> None:
        """A peer declared us dead (we lost our lease): drop every claim, join again anew."""
        log.error("worker %s was declared dead by a peer; dropping claims", self.shared.worker_id)
        self.shared.declared_dead = True
        while self.shared.held:
            await asyncio.sleep(0.05)
        await self.hb.close()
        await self._register()

    async def _maintenance_loop(self) -> None:
        """Rescue what dead peers held and mark finished broadcasts, on a short period."""
        period = max(0.5, min(self.settings.lease_seconds / 3, 5.0))
        link = Link(self.url, self.shared.stopping.is_set)
        cut_off = False
        cleaner = Cleaner(self.settings.retention_days)  # retention, at a low rate
        while True:
            try:
                conn = await link.conn()
                if cut_off:
                    self._grant_grace()
                    cut_off = False
                judge = self.shared.fresh() and time.monotonic() >= self.shared.lapse_grace_until
                n = await rescuer.sweep(
                    conn,
                    self.shared.worker_id,
                    self.ident,
                    self.settings.lease_seconds,
                    judge_lapses=judge,
                )
                if n:
                    log.warning("rescued %d jobs from dead workers", n)
                    self.shared.wake.set()
                await queue.finish(conn)
                await cleaner.maybe_clean(conn)
                # Every worker also runs the scheduler; SKIP LOCKED makes exactly one enqueue.
                if await asyncio.to_thread(scheduler.tick, self.url):
                    self.shared.wake.set()
            except psycopg.OperationalError as exc:
                log.warning("maintenance failed (%s)", one_line(exc))
                await link.close()
                cut_off = True
            await asyncio.sleep(period)

    async def _listen_loop(self) -> None:
        """Wake idle senders when a broadcast is enqueued or resumed (LISTEN/NOTIFY)."""
        link = Link(self.url, self.shared.stopping.is_set)
        while True:
            try:
                conn = await link.conn()
                await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                async for note in conn.notifies():
                    if note.payload.startswith("stop:"):
                        # Paused or cancelled: senders give back what they have not started.
                        self.shared.paused.add(int(note.payload[5:]))
                    self.shared.wake.set()
            except psycopg.OperationalError:
                await link.close()
                await asyncio.sleep(0.5)

    async def run(self) -> int:
        """Run until stop(); return the process exit code."""
        _Alarm.install()
        await self._register()
        conn = await self.hb.conn()
        n = await rescuer.sweep(
            conn, self.shared.worker_id, self.ident, self.settings.lease_seconds
        )
        log.info(
            "worker %s started with %d senders; rescued %d jobs at boot",
            self.shared.worker_id,
            self.concurrency,
            n,
        )
        heartbeat = asyncio.create_task(self._heartbeat_loop())
        background = [
            heartbeat,
            asyncio.create_task(self._supervisor_loop(heartbeat)),
            asyncio.create_task(self._maintenance_loop()),
            asyncio.create_task(self._listen_loop()),
            # Broadcasts still being enqueued: their next chunks, PARTS at a time (broadcast.py).
            *(
                asyncio.create_task(
                    run_enqueuer(
                        self.url,
                        self.shared.stopping,
                        self.shared.wake.set,
                        self.settings.enqueue_chunk,
                    )
                )
                for _ in range(PARTS)
            ),
        ]
        # A group commits when every sender has an outcome in it, or one sender needs its own.
        link = Link(self.url, self.shared.stopping.is_set)
        recorder = Recorder(link, self._owner, full=self.concurrency)
        # Not in `background`: it must outlive every sender, which waits on it.
        recording = asyncio.create_task(recorder.run())
        senders = [
            asyncio.create_task(Sender(self.shared, i, recorder).run())
            for i in range(self.concurrency)
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
        try:
            # Bounded: with the database gone, peers (or our replacement) will rescue instead.
            async with asyncio.timeout(10):
                await self.hb.retrying(queue.finish)
                await self.hb.retrying(
                    lambda c: rescuer.deregister(c, self.shared.worker_id, failed)
                )
        except TimeoutError:
            log.warning(
                "could not deregister worker %s: database unreachable", self.shared.worker_id
            )
        finally:
            await self.hb.close()
            await self.permits.close()
        log.info(
            "worker %s stopped after %d messages sent", self.shared.worker_id, self.shared.sent
        )
        return 1 if failed else 0

    async def _until_done(
        self, senders: list[asyncio.Task[None]], background: list[asyncio.Task[None]]
    ) -> str | None:
        """Wait for the senders to end (after stop()); None, or why the worker must stop now.

        A background task (heartbeat, rescuer, listener, enqueuer) runs for as long as the
        worker does: one that ends with an error would leave a process that looks alive but
        keeps no lease or rescues nobody, so it stops the worker instead, with the reason."""
        everything = {*senders, *background}
        while True:
            done, _ = await asyncio.wait(everything, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                everything.discard(task)
                exc = None if task.cancelled() else task.exception()
                if isinstance(exc, OutcomeNotWritten):
                    raise exc
                if task in background and self.shared.stopping.is_set() and exc is None:
                    continue  # a duty that ends with the worker
                if exc is not None or task in background:
                    what = "a sender" if task in senders else "a background task"
                    reason = _summary(exc) if exc is not None else "ended"
                    log.error("stopping: %s failed: %s", what, reason, exc_info=exc)
                    self.stop()
                    return f"stopped: {what} failed: {reason}"
            if all(t.done() for t in senders):
                return None


def run_worker(settings: Settings, url: str, concurrency: int) -> int:
    """Run a worker in this process until SIGTERM or SIGINT; graceful on the first.

    A second signal exits at once: an outcome that could not be written yet (database gone)
    is then left to the rescuer, and its message may be sent again.
    """

    async def main() -> int:
        worker = Worker(settings, url, concurrency)
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            if worker.shared.stopping.is_set():
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
