"""Group commit: the outcomes of every sender of a process, written together.

A sender hands its outcome to the recorder and waits for it before the final dot of its next
message, so each SMTP session still has at most one accepted, unrecorded message (invariant 3).
While one group commits, the next gathers; one statement and one commit carry them all, which
is most of what durability costs per message.

A sender also marks the job whose final dot goes next (`mark`, issue 23): the mark joins the
group that is gathering, usually the one of that sender's previous outcome (one more row in
the same statement and commit), and the dot waits for it, so a rescue knows which job may
have been accepted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import psycopg

from senddock import queue
from senddock.delivery.link import Link, one_line
from senddock.queue import Dot, Outcome

log = logging.getLogger("senddock.recorder")

# The longest an outcome waits for its group to commit when no sender needs it yet (a sender
# waiting for a rate-limit permit, say): the campaign's counts lag by no more than this.
MAX_LINGER = 0.05

# An outcome (or a dot's mark) waiting for its group, and the future its sender awaits.
Waiting = tuple[Outcome | Dot, "asyncio.Future[bool]"]


class Recorder:
    """Writes outcomes in groups, one group at a time on its own connection; `run()` until
    cancelled. The next group gathers while one commits. (One connection gave larger groups
    and a better drain rate than three side by side: 1,451 against 1,039 msg/s, bench/speed.py.)
    """

    def __init__(
        self,
        link: Link,
        owner: Callable[[], int],
        full: int = 1,
        linger: float = MAX_LINGER,
    ) -> None:
        """`full`: a group commits as soon as it holds this many outcomes, or when a sender
        needs one of them written (`need()`), or `linger` seconds after its first arrived.
        Waiting for the need is what makes groups large: a sender needs its outcome only at
        its next final dot, so the outcomes of the other senders join it meanwhile."""
        self.link = link
        self.owner = owner
        self.full = full
        self.linger = linger
        self._waiting: list[Waiting] = []
        self._outcomes = 0  # how many of those are outcomes (`full` counts them)
        self._kick = asyncio.Event()  # commit now
        self._arrived = asyncio.Event()  # something waits to be committed
        self.groups = 0
        self.written = 0
        # Why a group could not be written (anything but a lost connection, which `_write`
        # outlasts): the recorder has stopped, and every outcome handed over since fails with it.
        self.failed: Exception | None = None

    def submit(self, outcome: Outcome) -> asyncio.Future[bool]:
        """Queue an outcome; the future says whether it was written (False: claim lost)."""
        return self._queue(outcome, counts=True)

    def mark(self, dot: Dot) -> asyncio.Future[bool]:
        """Queue the mark of a final dot about to go; the future says whether it was written
        (False: claim lost, the dot must not go). It does not fill a group: it rides with one."""
        return self._queue(dot, counts=False)

    def _queue(self, item: Outcome | Dot, counts: bool) -> asyncio.Future[bool]:
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if self.failed is not None:
            done.set_exception(self.failed)
            return done
        self._waiting.append((item, done))
        self._arrived.set()
        if counts:
            # Full counts outcomes only: a group is full when every sender's outcome is in,
            # whatever marks ride with them (counting the marks halved the groups).
            self._outcomes += 1
            if self._outcomes >= self.full:
                self._kick.set()
        return done

    def need(self) -> None:
        """A sender waits for an outcome it submitted: commit what is waiting now."""
        if self._waiting:
            self._kick.set()

    async def run(self) -> None:
        try:
            while True:
                if not self._waiting:
                    self._arrived.clear()
                    await self._arrived.wait()
                if not self._kick.is_set():
                    # Nobody needs them yet: wait for a need, a full group, or the linger (a
                    # timer, not wait_for(), which costs a task per group).
                    linger = asyncio.get_running_loop().call_later(self.linger, self._kick.set)
                    await self._kick.wait()
                    linger.cancel()
                self._kick.clear()
                group, self._waiting, self._outcomes = self._waiting, [], 0
                await self._commit(group)
        finally:
            await self.link.close()

    async def _commit(self, group: list[Waiting]) -> None:
        outcomes = [o for o, _ in group if isinstance(o, Outcome)]
        ended = {o.job.id for o in outcomes}
        # A job refused before its dot has its outcome in the same group as its mark: the
        # outcome supersedes the mark (one statement must not write one row twice).
        dots = [d for d, _ in group if isinstance(d, Dot) and d.job.id not in ended]
        try:
            written, marked = await self._write(outcomes, dots)
        except BaseException as exc:
            if isinstance(exc, Exception):
                log.error("%d outcomes could not be written: %s", len(group), one_line(exc))
                self.failed = exc
            else:  # cancelled (the worker is stopping) or exiting
                self.failed = RuntimeError("recorder stopped")
            for _, done in group + self._waiting:
                if not done.done():
                    done.set_exception(self.failed)
            self._waiting, self._outcomes = [], 0
            raise
        self.groups += 1
        self.written += len(outcomes)
        for item, done in group:
            if not done.done():
                done.set_result(item.job.id in (written if isinstance(item, Outcome) else marked))

    async def _write(self, outcomes: list[Outcome], dots: list[Dot]) -> tuple[set[int], set[int]]:
        """Write a group once; the ids of the outcomes written and of the dots marked (none
        of one job). If the commit is not acknowledged, read back before retrying."""
        db = self.link
        delay = 0.05
        while True:
            conn = await db.conn()
            try:
                done = await queue.record_group(conn, self.owner(), outcomes, dots)
                return done.outcomes, done.dots
            except psycopg.OperationalError as exc:
                log.warning("%d outcomes not acknowledged (%s)", len(outcomes), one_line(exc))
                await db.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            try:
                conn = await db.conn()
                landed = await queue.landed_many(
                    conn, self.owner(), [o.job for o in outcomes], [d.job for d in dots]
                )
            except psycopg.OperationalError:
                await db.close()
                continue
            if landed:
                # The group is one transaction: it committed, and what matched its fence is in.
                return landed - {d.job.id for d in dots}, landed & {d.job.id for d in dots}
