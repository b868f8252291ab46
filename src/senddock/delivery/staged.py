"""The next message of a session, as far as it is staged before its final dot.

A sender sends one message at a time (delivery/sender.py), and stages each before it goes:
its bytes rendered, a server picked by weight (delivery/servers.py), that server's rate-limit
permit taken (delivery/ratelimit.py), its envelope sent and DATA accepted; only then is its
final dot marked (issue 23, `Sender._dot_may_go`), so that nothing but the dot follows the
mark's commit (issue 41). Most of that happens as the message is sent; the pick and permit
may happen one message earlier, at the previous final dot, when the next envelope goes with
that dot (`Sender._ahead`, a far relay). This object carries what was staged from there to
the send, so that nothing is staged twice and nothing staged is lost.
"""

from __future__ import annotations

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

    @property
    def job_id(self) -> int:
        return self.job.id

    def elsewhere(self, target: SmtpTarget) -> None:
        """Its server could not be reached: it goes to `target`, and needs that one's permit
        (the one in hand was given back as the session failed to open)."""
        self.target = target
        self.permit = None
