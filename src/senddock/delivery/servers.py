"""Which SMTP server a message goes to: by weight among the healthy ones.

Health is judged in this process only. A connection-level failure (no reply or a 4xx at
connect, EHLO, STARTTLS or AUTH) marks a server down for a backoff of 1 s doubling to 60 s;
after it, one sender at a time tries the server again, and a session that gets past AUTH
makes it healthy. Weights are met per message with smooth weighted round-robin (nginx's), so
the shares are exact within one process, not merely on average.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from senddock.config import SmtpTarget
from senddock.delivery.outcome import Reply

log = logging.getLogger("senddock.worker")

# Stages at which a failure says the server is unreachable, not that a message is bad.
CONNECTION_STAGES = frozenset({"connect", "ehlo", "starttls", "auth"})
MIN_DOWN = 1.0
MAX_DOWN = 60.0


def connection_failed(reply: Reply) -> bool:
    """No session: no reply or a 4xx before MAIL FROM (a 5xx there is about us: outcome.py)."""
    code = reply.code
    return reply.stage in CONNECTION_STAGES and (code is None or 400 <= code < 500)


@dataclass
class _Server:
    target: SmtpTarget
    current: int = 0  # smooth weighted round-robin credit
    backoff: float = 0.0  # 0: healthy
    down_until: float = 0.0  # monotonic
    probing_until: float = 0.0  # monotonic: one sender is trying the server again until then


class ServerPool:
    """The servers of SENDDOCK_SMTP_URL and their health, shared by one process's senders."""

    def __init__(self, targets: list[SmtpTarget], probe_timeout: float = 60.0) -> None:
        if not targets:
            raise ValueError("no SMTP server")
        self._servers = {t.name: _Server(t) for t in targets}
        self._only = targets[0] if len(targets) == 1 else None
        self.probe_timeout = probe_timeout

    @property
    def targets(self) -> list[SmtpTarget]:
        return [s.target for s in self._servers.values()]

    def _usable(self, s: _Server, now: float) -> bool:
        if s.backoff == 0.0:
            return True
        return now >= s.down_until and now >= s.probing_until

    def any_usable(self) -> bool:
        """Is some server healthy, or due for another try that nobody is making?"""
        now = time.monotonic()
        return any(self._usable(s, now) for s in self._servers.values())

    def pick(self) -> SmtpTarget:
        """The next server by weight among usable ones.

        With none usable, the one back soonest: its attempt then fails like a single relay's
        would (the job takes the transient failure and the sender backs off).
        """
        if self._only is not None:
            return self._only  # one server: nothing to choose, down or not
        now = time.monotonic()
        usable = [s for s in self._servers.values() if self._usable(s, now)]
        if not usable:
            return min(self._servers.values(), key=lambda s: s.down_until).target
        total = sum(s.target.weight for s in usable)
        for s in usable:
            s.current += s.target.weight
        best = max(usable, key=lambda s: s.current)
        best.current -= total
        if best.backoff:
            best.probing_until = now + self.probe_timeout  # others keep away while it is tried
        return best.target

    def failed(self, name: str, why: str = "") -> None:
        """A connection-level failure: down for a backoff that doubles while it lasts."""
        s = self._servers[name]
        now = time.monotonic()
        if s.backoff and now < s.down_until:
            return  # a sender that started before it went down: already counted
        if not s.backoff:  # said once when it goes down, not at every retry
            log.warning("cannot reach SMTP server %s: %s", s.target.describe(), why or "failed")
        s.backoff = min(max(s.backoff * 2, MIN_DOWN), MAX_DOWN)
        s.down_until = now + s.backoff
        s.probing_until = 0.0

    def succeeded(self, name: str) -> None:
        """A session got past AUTH: the server is healthy."""
        s = self._servers[name]
        if s.backoff:
            log.warning("SMTP server %s is reachable again", s.target.describe())
        s.backoff = s.down_until = s.probing_until = 0.0

    def settled(self, name: str) -> None:
        """An attempt that says nothing about reachability ended: let others try it too."""
        self._servers[name].probing_until = 0.0
