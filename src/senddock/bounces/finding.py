"""One recipient a returned message or a provider's event reports on (bounces/parse.py and
bounces/providers.py both make them; a module of its own, so neither imports the other to get
it)."""

from __future__ import annotations

from dataclasses import dataclass

from senddock.bounces.classify import KIND, Kind, Reason, judge, reason_of


@dataclass(frozen=True)
class Finding:
    """One recipient a returned message reports on, and what it says about them: its reason
    (bounces.classify), whose kind the one table gives. A source that decides the kind itself
    (a provider's event) may leave the reason out: the judged one of that kind fills it in."""

    recipient: str | None
    kind: Kind
    status: str | None
    reply: str | None
    diagnostic: str | None
    # The Message-ID of the returned original (ours), when the bounce carries it.
    message_id: str | None = None
    reason: Reason | None = None

    def __post_init__(self) -> None:
        if self.reason is None:
            reason = reason_of(self.kind, self.status, self.reply, self.diagnostic)
            object.__setattr__(self, "reason", reason)
        elif KIND[self.reason] != self.kind:
            raise ValueError(f"a {self.reason} finding is {KIND[self.reason]}, not {self.kind}")

    @classmethod
    def judged(
        cls,
        recipient: str | None,
        status: str | None,
        reply: str | None,
        diagnostic: str | None,
        message_id: str | None,
    ) -> Finding:
        """A failed recipient's finding, its reason and kind judged from its reply."""
        verdict = judge(status, reply, diagnostic)
        return cls(recipient, verdict.kind, status, reply, diagnostic, message_id, verdict.reason)
