"""One concurrent sender of a worker: its SMTP sessions, one message past its final dot at a time.

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
a rate-limit permit in hand for it): one round trip a message instead of two (smtp/session.py);
a sender claims its next batch before the last message of a batch, so that holds across batches.
Database faults are retried with backoff; an outcome whose commit was not acknowledged is read
back before it is written again.

One recipient's data never costs another anything: whatever goes wrong while preparing or
sending one job (an address the relay cannot take, a name or attribute a template chokes on,
a bug) is that job's outcome, `rejected` with the reason, logged once with its traceback. A
process that dies anyway gives its jobs back as suspects (senddock/queue/jobs.sql, rescue),
and holds at most one suspect at a time, so a job that kills its worker fails alone.
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

import psycopg

from senddock import queue
from senddock.config import Settings, SmtpTarget
from senddock.delivery.dotlog import DotLog, NoDotLog
from senddock.delivery.link import Link, Stopped, one_line
from senddock.delivery.outcome import SENDER_STAGES, Reply, Verdict, judge, transition
from senddock.delivery.ratelimit import LONG_WAIT, UNMETERED, Permit
from senddock.delivery.recorder import Recorder
from senddock.delivery.servers import CONNECTION_STAGES, connection_failed
from senddock.delivery.staged import Staged
from senddock.delivery.state import Claims, Control, Envelope, Lease, Messages, Relays, Tally
from senddock.messages import CompiledMessage, Recipient, TemplateProblem
from senddock.messages.sandbox import RENDER_SECONDS, end_render
from senddock.queue import Job, Outcome
from senddock.smtp.session import SmtpSession

log = logging.getLogger("senddock.worker")


# Test hook: a job for this address SIGKILLs its worker as it is prepared, every time (the
# poison job of tests/test_poison.py and bench/chaos.py's `poison` scenario). Unset in use.
KILL_ON = os.environ.get("SENDDOCK_TEST_KILL_ON") or None


class OutcomeNotWritten(Exception):
    """An outcome the recorder could not write (not a lost connection, which it outlasts): no
    sender may send another final dot, so the worker stops and its jobs are rescued."""


class DotRefused(Exception):
    """The mark of a final dot about to go found no claim (rescued or released meanwhile):
    that dot must not go."""


class Unsent(enum.Enum):
    """Why a claimed job goes back without being sent."""

    STOP = "stop"  # stopping or declared dead: the rest of the batch goes back too
    PAUSED = "paused"  # its broadcast was paused while it waited for a permit


class Sender:
    """One concurrent sender: its SMTP sessions, and one message past its final dot at a time."""

    def __init__(
        self,
        index: int,
        settings: Settings,
        url: str,
        *,
        lease: Lease,
        claims: Claims,
        control: Control,
        relays: Relays,
        messages: Messages,
        tally: Tally,
        recorder: Recorder,
        dots: DotLog | NoDotLog | None = None,
    ) -> None:
        self.index = index
        self.settings = settings
        self.lease = lease
        self.claims = claims
        self.control = control
        self.relays = relays
        self.messages = messages
        self.tally = tally
        self.recorder = recorder
        # The process's dot log: this sender's slot names each job whose final dot is next.
        self.dots = dots or NoDotLog()
        self.db = Link(url, control.stopping.is_set)
        # One session per server this sender has used; each message picks its server.
        self.sessions: dict[str, SmtpSession] = {}
        self.connect_backoff = 0.0
        self.worked = False
        # The outcome last handed to the recorder. The next message's final dot waits for it
        # (invariant 3); its envelope (MAIL, RCPT, DATA) overlaps that commit.
        self.previous: asyncio.Future[bool] | None = None
        # Its job: a `sent` outcome carries the mark of the next final dot (queue.Dot.after).
        self.previous_job: int | None = None
        # The next job as the last final dot staged it (`_ahead`, `_prepare_next`).
        self.staged: Staged | None = None

    async def run(self) -> None:
        ahead: list[Job] | None = None  # the next batch, claimed before the last one ended
        try:
            while not self.control.stopping.is_set():
                if ahead is None and not self.lease.fresh():
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

    async def _dot_may_go(self, marked: asyncio.Future[bool]) -> None:
        """Before a final dot: the previous outcome written (invariant 3) and this dot's mark
        (issue 23); DotRefused if the mark found the claim lost."""
        await self._settle()
        if not await self._written(marked):
            raise DotRefused("the claim was lost before the final dot")

    async def _written(self, outcome: asyncio.Future[bool]) -> bool:
        """Once the recorder has answered for an outcome: was it written (False: claim lost)?"""
        if not outcome.done():
            self.recorder.need()
            await asyncio.wait([outcome])
        if outcome.cancelled() or outcome.exception() is not None:
            raise OutcomeNotWritten("the recorder could not write an outcome")
        return outcome.result()

    async def _claim(self) -> list[Job]:
        async with self.claims.lock:
            try:
                conn = await self.db.conn(give_up_when_stopping=True)
                n = self.settings.claim_batch
                # A process holds at most one suspect: if it dies, that one alone is charged.
                suspect = self.claims.suspect is None
                jobs = await queue.claim(conn, self.lease.worker_id, n, suspect=suspect)
            except Stopped:
                return []
            except psycopg.OperationalError as exc:
                # The claim may have committed with its reply lost: give back whatever this
                # process holds in the database but no sender knows about.
                # If we stop first they stay ours until our row is gone; then a peer rescues them.
                log.warning("claim interrupted (%s); releasing orphans", one_line(exc))
                await self.db.close()
                known = sorted(self.claims.jobs)
                with contextlib.suppress(Stopped):
                    await self.db.retrying(
                        lambda c: queue.release_orphans(c, self.lease.worker_id, known),
                        give_up_when_stopping=True,
                    )
                return []
            for j in jobs:
                self.claims.took(j.id, j.suspect)
            # The database said these broadcasts are running (resumed, if we had paused them).
            self.control.stopped.difference_update(j.broadcast_id for j in jobs)
            return jobs

    async def _idle(self) -> None:
        self.control.wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.control.wake.wait(), timeout=0.5)

    async def _send_batch(self, jobs: list[Job]) -> list[Job] | None:
        """Send a claimed batch in order; the next batch, if this sender claimed it before
        the last message of this one (else None).

        That claim comes first so that the last message's final dot can carry the envelope
        of the next batch's first, as it does within a batch: to a far relay, one round trip
        a batch saved (smtp/session.py). Jobs claimed ahead and never started go back."""
        ahead: list[Job] | None = None
        for i, job in enumerate(jobs):
            if self.control.stopping.is_set() or self.lease.declared_dead:
                await self._give_back(jobs[i:])
                return None
            if job.broadcast_id in self.control.stopped:
                await self._give_back([job])
                continue
            following = jobs[i + 1] if i + 1 < len(jobs) else None
            if following is None and self.lease.fresh():  # claim only as `run()` does
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
            await self._record(job, verdict, reply, following)
            if verdict is Verdict.TRANSIENT and reply.stage in SENDER_STAGES:
                await self._settle()
                # The relay is unreachable or refusing sessions: this job took the failure;
                # the rest of the batch goes back untouched while this sender backs off.
                await self._give_back(jobs[i + 1 :] + (ahead or []))
                self.connect_backoff = min(max(self.connect_backoff * 2, 0.5), 30.0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.control.stopping.wait(), self.connect_backoff)
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
            message, envelope = await self._compiled(job.broadcast_id)
        except TemplateProblem as exc:
            return Reply("render", 554, f"5.6.0 {exc}")
        staged = self._stage(job, message)
        if isinstance(staged, Reply):
            return staged
        tries = len(self.relays.servers.targets)
        while True:
            reply = await self._attempt(staged, envelope, following)
            if isinstance(reply, Unsent) or not self._unreachable(staged.target, reply):
                return reply
            tries -= 1
            if tries <= 0 or not self.relays.servers.any_usable():
                return reply
            log.warning(
                "SMTP server %s unreachable (%s); sending job %s via another",
                staged.target.name,
                reply.summary(),
                job.id,
            )
            staged.elsewhere(self.relays.servers.pick())

    def _stage(self, job: Job, message: CompiledMessage) -> Staged | Reply:
        """`job`'s message rendered, its server picked: as the last final dot staged it
        (`_ahead`, `_prepare_next`), if that was this job; or the Reply that fails it.

        A job staged for and not coming (it went back) gives its permit back."""
        staged = self.staged
        if staged is not None and staged.job_id == job.id and staged.data is not None:
            data: bytes | Reply = staged.data
        else:
            data = _prepare(job, message)
        if isinstance(data, Reply):
            return data
        self.staged = None
        if staged is None or staged.job_id != job.id:
            if staged is not None:
                self._give_back_permit(staged.target, staged.permit)  # its job did not come
            staged = Staged(job, self.relays.servers.pick())
        staged.data = data
        return staged

    async def _attempt(
        self, staged: Staged, envelope: Envelope, following: Job | None
    ) -> Reply | Unsent:
        """One try on the staged server: its session open, its permit, the message sent."""
        target, job = staged.target, staged.job
        session = self._session(target)
        reply = await session.open()
        if reply is not None:
            self._give_back_permit(target, staged.permit)
            return reply
        unsent = await self._metered(target, session, job, staged.permit)
        if unsent is not None:
            self.relays.servers.settled(target.name)
            return unsent
        then = None
        if following is not None and following.broadcast_id == job.broadcast_id:
            then = functools.partial(self._ahead, target, following, envelope)
        # Issue 23: this job's dot goes next on this sender; the mark rides with the previous
        # outcome's commit when it can, and the dot waits for both. Queued with that outcome
        # already if this envelope went with its dot, or it was rendered then (`_record`).
        marked = staged.take_mark() or self.recorder.mark(
            queue.Dot(job, target.name, self.previous_job)
        )
        marked.add_done_callback(_retrieved)
        before_dot = functools.partial(self._dot_may_go, marked)
        # Then, right before the write that carries the dot, this sender's slot in the dot log
        # names the job (delivery/dotlog.py): a rescuer on this host can tell the dot went.
        at_dot = functools.partial(self.dots.note, self.index, job.id, job.attempts)
        assert staged.data is not None  # `_stage` rendered it
        try:
            return await session.send(
                envelope(job.subscriber_id),
                job.email,
                staged.data,
                before_dot=before_dot,
                then=then,
                at_dot=at_dot,
            )
        except DotRefused:
            session.close()  # in its DATA: hang up, never send that dot
            log.error("claim on job %s was lost before its final dot", job.id)
            return Unsent.STOP
        except OutcomeNotWritten:
            raise
        except Exception as exc:  # a bug on one job's path: its outcome, not a crash
            log.exception("job %s: sending failed; it fails as rejected", job.id)
            session.close()  # whatever state the session was left in, start anew
            return Reply("render", 554, f"5.3.0 not sent: {summary(exc)}")

    def _unreachable(self, target: SmtpTarget, reply: Reply) -> bool:
        """Tell the server pool how `target` answered; True if it could not be reached."""
        if not connection_failed(reply):
            if reply.stage in CONNECTION_STAGES:
                self.relays.servers.settled(target.name)  # a 5xx about us: outcome.py judges it
            else:
                self.relays.servers.succeeded(target.name)
            return False
        self.relays.servers.failed(target.name, reply.summary())
        return True

    def _ahead(self, target: SmtpTarget, job: Job, envelope: Envelope) -> tuple[str, str] | None:
        """At a final dot on `target`'s session: the envelope of `job`, next in the batch, to
        go with it, if `job` will surely be sent next on that session; else None.

        Its server is picked now (`_deliver` keeps the pick), and so is a rate-limited server's
        permit, if one is in hand; with none, the job waits for one as usual, its envelope not
        sent ahead. A job that goes back unsent after all (paused, stopping) only costs the
        session: it hangs up rather than end that envelope's DATA (smtp/session.py).
        """
        if (
            self.control.stopping.is_set()
            or not self.lease.fresh()
            or job.broadcast_id in self.control.stopped
        ):
            return None
        picked = self.relays.servers.pick()
        permit = None
        if picked.name == target.name:
            limiter = self.relays.limiters.get(target.name)
            permit = UNMETERED if limiter is None else limiter.take_now()
        self.staged = Staged(job, picked, permit)
        return None if permit is None else (envelope(job.subscriber_id), job.email)

    def _prepare_next(self, job: Job) -> Staged | None:
        """After a sent message whose final dot carried no envelope: `job`, next on this
        sender, rendered now, with its server picked and its permit taken, if one is free at
        once (as `_ahead` does); None if it may not start now or cannot be rendered here.

        Rendered before its mark is queued, as `_deliver` renders before it marks: a job that
        kills its worker while being rendered dies unmarked, a suspect (invariant 3), never
        unconfirmed."""
        compiled = self.messages.compiled.get(job.broadcast_id)
        if (
            compiled is None
            or self.control.stopping.is_set()
            or not self.lease.fresh()
            or job.broadcast_id in self.control.stopped
        ):
            return None
        data = _prepare(job, compiled[0])
        if isinstance(data, Reply):
            return None  # `_deliver` renders it again and records why it failed
        picked = self.relays.servers.pick()
        limiter = self.relays.limiters.get(picked.name)
        permit = UNMETERED if limiter is None else limiter.take_now()
        if permit is None:
            return None
        self.staged = Staged(job, picked, permit, data=data)
        return self.staged

    def _give_back_permit(self, target: SmtpTarget, permit: Permit | None) -> None:
        limiter = self.relays.limiters.get(target.name)
        if limiter is not None and permit is not None:
            limiter.give_back(permit)

    async def _metered(
        self, target: SmtpTarget, session: SmtpSession, job: Job, in_hand: Permit | None = None
    ) -> Unsent | None:
        """Wait for the server's permit and for leave to start; None when MAIL FROM may go.

        `in_hand`: the permit taken when this job's envelope went with the last final dot. A
        permit whose window ended meanwhile is void (its window counted it): take another.
        """
        limiter = self.relays.limiters.get(target.name)
        if in_hand is not None and in_hand.valid():
            unsent = await self._may_start(job)
            if unsent is not None:
                self._give_back_permit(target, in_hand)
            return unsent
        if limiter is None and self.lease.fresh() and job.broadcast_id not in self.control.stopped:
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
            timeout = self.settings.smtp_timeout
            session = SmtpSession(target, timeout, verify_certs=target.verify)
            self.sessions[target.name] = session
        return session

    async def _may_start(self, job: Job) -> Unsent | None:
        """Wait until this process may start a message (its lease held); None when it may."""
        while not self.lease.fresh():
            if self.lease.declared_dead:
                return Unsent.STOP
            await asyncio.sleep(0.1)
        return Unsent.PAUSED if job.broadcast_id in self.control.stopped else None

    async def _compiled(self, broadcast_id: int) -> tuple[CompiledMessage, Envelope]:
        found = self.messages.compiled.get(broadcast_id)
        if found is None:
            # Templates, headers and the signed unsubscribe links (SENDDOCK_PUBLIC_URL, key).
            compose = self.messages.compose
            built = await self.db.retrying(lambda c: compose(c, broadcast_id))
            if built is None:
                raise TemplateProblem(f"broadcast {broadcast_id} has no campaign")
            found = self.messages.compiled[broadcast_id] = built
        return found

    async def _record(
        self, job: Job, verdict: Verdict, reply: Reply, following: Job | None = None
    ) -> None:
        st = self.settings
        if reply.stage == "render":
            verdict = Verdict.REJECTED
        if verdict is Verdict.UNCONFIRMED and st.unconfirmed == "resend":
            verdict = Verdict.TRANSIENT  # a rare duplicate rather than a decision
        t = transition(
            verdict, job.attempts, job.sender_faults, st.backoff, st.job_sender_fault_limit
        )
        written = self.previous = self.recorder.submit(Outcome(job, t, reply))
        self.previous_job = job.id
        written.add_done_callback(lambda done: self._recorded(job, t.status, verdict, done))
        ahead = self.staged
        if ahead is None and t.status == "sent" and following is not None:
            # Its row carries the mark of the next dot (0025) if that mark is in its group:
            # mark the next job now, with this outcome, rather than after its envelope, when
            # this outcome's group has mostly gone (on a near relay the envelope is quicker
            # than a commit, so its dot rarely waits longer for it).
            ahead = self._prepare_next(following)
        if ahead is not None and ahead.permit is not None and verdict is not Verdict.TRANSIENT:
            # The next job's envelope went with this dot, its permit in hand: its own final dot
            # is the next on this session. Its mark joins this outcome's group now (one commit
            # for both, as before issue 23), rather than a group of its own after it.
            ahead.marked = self.recorder.mark(queue.Dot(ahead.job, ahead.target.name, job.id))
        if verdict is Verdict.SENDER_FAULT:
            if await self._written(written):
                await self._sender_fault(job.broadcast_id, reply)
        elif verdict is not Verdict.TRANSIENT or reply.stage not in SENDER_STAGES:
            self.tally.faults_in_row.pop(job.broadcast_id, None)

    def _recorded(
        self, job: Job, status: str, verdict: Verdict, written: asyncio.Future[bool]
    ) -> None:
        """Once the recorder has answered for a job: it is no longer held, or its claim was lost.

        An outcome the recorder failed to write leaves the job held, `sending`: it was started,
        so it is never released as unstarted; the worker stops and it is rescued."""
        if written.cancelled() or written.exception() is not None:
            log.error("outcome of job %s (%s) not written; it will be rescued", job.id, status)
            return
        self.claims.let_go(job.id)
        if not written.result():
            log.error(
                "claim on job %s was lost before its outcome (%s) was written", job.id, status
            )
        elif verdict is Verdict.SENT:
            self.tally.sent += 1

    async def _sender_fault(self, broadcast_id: int, reply: Reply) -> None:
        """A reply about us: count it; after a few in a row, pause the broadcast."""
        n = self.tally.faults_in_row.get(broadcast_id, 0) + 1
        self.tally.faults_in_row[broadcast_id] = n
        reason = reply.summary()
        if n >= self.settings.sender_fault_limit:
            log.error("pausing broadcast %s after %d replies about us: %s", broadcast_id, n, reason)
            self.control.stopped.add(broadcast_id)
            self.tally.faults_in_row.pop(broadcast_id, None)
            await self.db.retrying(lambda c: queue.pause_for_sender_fault(c, broadcast_id, reason))
        else:
            await self.db.retrying(lambda c: queue.note_sender_fault(c, broadcast_id, reason))

    async def _give_back(self, jobs: list[Job]) -> None:
        if not jobs:
            return
        # Stopping with the database gone: leave them; they are rescued once we are known dead.
        with contextlib.suppress(Stopped):
            await self.db.retrying(
                lambda c: queue.release(c, self.lease.worker_id, jobs), give_up_when_stopping=True
            )
        for j in jobs:
            self.claims.let_go(j.id)


def _retrieved(done: asyncio.Future[bool]) -> None:
    """A mark's future nobody awaited (the dot never came): its error is the recorder's, told
    through the outcomes."""
    if not done.cancelled():
        done.exception()


def summary(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# The sandbox stops a render past RENDER_SECONDS at its next call, attribute or output; a loop
# that makes none (or one C call that runs long) is stopped by SIGALRM at twice that, in a
# worker's main thread (where Python runs signal handlers), as that job's outcome.
HARD_LIMIT = 2 * RENDER_SECONDS


class RenderTimeout(Exception):
    """A render stopped by the alarm."""


class Alarm:
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
            end_render()


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
        with Alarm.limit():
            return message.render(rcpt, job.message_id)
    except TemplateProblem as exc:
        log.warning("job %s not sent: %s", job.id, exc)
        return Reply("render", 554, f"5.6.0 {exc}")
    except Exception as exc:
        log.exception("job %s: its message could not be made; it fails as rejected", job.id)
        return Reply("render", 554, f"5.6.0 not sent: the message failed: {summary(exc)}")
