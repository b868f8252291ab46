"""The next message of a session, as far as it is staged before its final dot.

A sender sends one message at a time (delivery/sender.py), and stages each before it goes:
its bytes rendered, a server picked by weight (delivery/servers.py), that server's rate-limit
permit taken (delivery/ratelimit.py), and the mark of its final dot queued with the recorder
(issue 23, delivery/recorder.py). Most of that happens as the message is sent; some of it may
happen one message earlier, at the previous final dot: the next envelope goes with that dot
(`Sender._ahead`, a far relay), or the next message is rendered and marked with the previous
outcome (`Sender._prepare_next`, a near one). This object carries what was staged from there
to the send, so that nothing is staged twice and nothing staged is lost.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from senddock.config import SmtpTarget
from senddock.delivery.ratelimit import Permit
from senddock.queue import Job


@dataclass
class Staged:
    """One job's message on its way: the server it goes to and what is in hand for it."""

    job: Job
    # The server picked for it; picked again if that one cannot be reached (`elsewhere`).
    target: SmtpTarget
    # That server's permit, taken before MAIL FROM (None: not taken yet).
    permit: Permit | None = None
    # Its bytes, once rendered (None: not yet).
    data: bytes | None = None
    # The mark of its final dot (issue 23), once queued; queued early with the outcome of the
    # message before it when its envelope went with that message's dot (`Sender._record`):
    # then both ride in one group.
    marked: asyncio.Future[bool] | None = None

    @property
    def job_id(self) -> int:
        return self.job.id

    def elsewhere(self, target: SmtpTarget) -> None:
        """Its server could not be reached: it goes to `target`, and needs that one's permit
        (the one in hand was given back as the session failed to open)."""
        self.target = target
        self.permit = None

    def take_mark(self) -> asyncio.Future[bool] | None:
        """The mark queued for its dot ahead of time, if any; the dot about to go spends it."""
        marked, self.marked = self.marked, None
        return marked
