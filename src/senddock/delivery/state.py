"""What the senders of one worker process share, one small object per concern.

None of it needs to survive a crash: the database holds every fact that must. The worker
(delivery/worker.py) makes one of each and hands them to its senders (delivery/sender.py).

- `Lease`: may this process start a message (its heartbeat acknowledged, not declared dead)?
- `Claims`: the jobs this process has claimed and not let go, and the one suspect among them.
- `Control`: stop, wake idle senders, and the broadcasts told to stop (paused or cancelled).
- `Relays`: the SMTP servers, their health and rate limits.
- `Messages`: each broadcast's compiled message, compiled once per process.
- `Tally`: messages sent, and replies about us in a row per broadcast.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from senddock.delivery.ratelimit import RateLimiter
from senddock.delivery.servers import ServerPool
from senddock.messages import CompiledMessage
from senddock.queue import AsyncConn

# A broadcast's envelope sender of one subscriber's message (the From address, or a VERP
# return path that names the job).
Envelope = Callable[[int], str]
# A broadcast's compiled message and its envelope senders; None when it has no campaign. The
# process's top (senddock/runtime.py) supplies it: composing a message is campaigns' work.
Compose = Callable[[AsyncConn, int], Awaitable[tuple[CompiledMessage, Envelope] | None]]


@dataclass
class Lease:
    """This process's lease on its claims (delivery/rescuer.py), as far as it knows."""

    seconds: float
    worker_id: int = 0
    # Monotonic time of the last heartbeat the database acknowledged.
    acknowledged: float = field(default_factory=time.monotonic)
    declared_dead: bool = False
    # Until then (monotonic), judge no peer dead by a lapsed lease: we were cut off ourselves.
    lapse_grace_until: float = 0.0

    def fresh(self) -> bool:
        """May this process start a message? Only while its lease is surely still held."""
        age = time.monotonic() - self.acknowledged
        return not self.declared_dead and age < self.seconds / 2

    def grant_grace(self) -> None:
        """We just got the database back: peers cut off with us get a full lease to return."""
        self.lapse_grace_until = max(self.lapse_grace_until, time.monotonic() + self.seconds)

    def may_judge_lapses(self) -> bool:
        """May this process judge a peer dead by its lapsed lease (rescuer.sweep)?"""
        return self.fresh() and time.monotonic() >= self.lapse_grace_until


@dataclass
class Control:
    """Stop, wake, and which broadcasts senders must not start (paused or cancelled)."""

    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    # Broadcasts told to stop (a NOTIFY `stop:ID`, or our own pause): claimed jobs go back.
    stopped: set[int] = field(default_factory=set)

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()


@dataclass
class Claims:
    """The jobs this process holds: claimed, and not yet written or given back."""

    control: Control
    jobs: set[int] = field(default_factory=set)
    # The one suspect among them, if any (a job a dead worker held: queue.RESCUE). A process
    # holds at most one, so that if it dies, that one alone is charged.
    suspect: int | None = None
    # One claim at a time per process: the suspect rule reads `suspect` before the claim.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def took(self, job_id: int, suspect: bool) -> None:
        self.jobs.add(job_id)
        if suspect:
            self.suspect = job_id

    def let_go(self, job_id: int) -> None:
        """This process no longer holds `job_id` (written, or given back)."""
        self.jobs.discard(job_id)
        if self.suspect == job_id:
            self.suspect = None
            self.control.wake.set()  # the next suspect may be claimed: an idle sender takes it


@dataclass
class Relays:
    """The SMTP servers of SENDDOCK_SMTP_URL: their health, and the rate limits of those that
    have any, by server name (delivery/ratelimit.py)."""

    servers: ServerPool
    limiters: dict[str, RateLimiter] = field(default_factory=dict)


@dataclass
class Messages:
    """Each broadcast's compiled message, compiled once per process by `compose`."""

    compose: Compose
    compiled: dict[int, tuple[CompiledMessage, Envelope]] = field(default_factory=dict)


@dataclass
class Tally:
    """What the senders counted: messages sent, and replies about us in a row per broadcast."""

    sent: int = 0
    faults_in_row: dict[int, int] = field(default_factory=dict)
