"""The proof at the SMTP server: who got how many copies, from what the server accepted.

The demo, the chaos harness and the crash tests judge a broadcast with this one routine, never
from our own rows: every expected recipient got a copy (nobody dropped), how many got more than
one (each must carry one Message-ID, DESIGN invariant 3), and who got mail with no job.

    proof = at_server(catcher.received(), expected={"a@example.com", "b@example.com"})
    assert not proof.undelivered and not proof.strangers() and not proof.mixed_ids
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from senddock.testing.catcher import Received


@dataclass(frozen=True)
class Proof:
    """What the server accepted, by lower-cased recipient, against who was expected."""

    copies: Mapping[str, list[Received]]  # in order of acceptance
    expected: frozenset[str]

    def count(self, rcpt: str) -> int:
        """Copies `rcpt` (lower-cased) received."""
        return len(self.copies.get(rcpt, ()))

    @property
    def messages(self) -> int:
        """Every copy accepted, to anyone."""
        return sum(len(got) for got in self.copies.values())

    @property
    def delivered(self) -> frozenset[str]:
        """Expected recipients who got at least one copy."""
        return self.expected & self.copies.keys()

    @property
    def undelivered(self) -> list[str]:
        """Expected recipients who got nothing, sorted."""
        return sorted(self.expected - self.copies.keys())

    @property
    def delivered_once(self) -> int:
        """Expected recipients who got exactly one copy."""
        return sum(1 for rcpt in self.expected if self.count(rcpt) == 1)

    @property
    def extra(self) -> dict[str, int]:
        """Recipients (expected or not) who got more than one copy -> copies beyond the first."""
        return {rcpt: len(got) - 1 for rcpt, got in self.copies.items() if len(got) > 1}

    @property
    def duplicates(self) -> int:
        """Copies beyond the first, over all recipients."""
        return sum(self.extra.values())

    def strangers(self, also: Iterable[str] = ()) -> list[str]:
        """Recipients who got mail but were neither expected nor in `also`, sorted."""
        return sorted(self.copies.keys() - self.expected - set(also))

    def message_ids(self, rcpt: str) -> set[str | None]:
        """The Message-IDs the copies to `rcpt` carried."""
        return {r.message_id for r in self.copies.get(rcpt, ())}

    @property
    def mixed_ids(self) -> list[str]:
        """Recipients whose copies do not all carry the same Message-ID, sorted."""
        return sorted(rcpt for rcpt in self.copies if len(self.message_ids(rcpt)) > 1)


def at_server(received: Iterable[Received], expected: Iterable[str]) -> Proof:
    """Group what the server accepted by lower-cased recipient; `expected`: lower-cased."""
    copies: dict[str, list[Received]] = defaultdict(list)
    for r in received:
        copies[r.rcpt.lower()].append(r)
    return Proof(dict(copies), frozenset(expected))
