"""The outcome rules: what one SMTP attempt means for its job. Pure; no I/O.

what happened                                  verdict       the job becomes
---------------------------------------------  ------------  ----------------------------------
250 after DATA                                 SENT          sent
4xx at any stage; connection refused or        TRANSIENT     retry after the backoff, or
  reset, timeout, DNS failure                                failed/exhausted after the last one
5xx at RCPT, enhanced code 5.1.x or none       BOUNCE        failed/bounced; address suppressed
5xx at connect, EHLO, STARTTLS, AUTH,          SENDER_FAULT  retry, attempt given back; after a
  MAIL FROM; 5xx at DATA; 5.7.x at RCPT                      few in a row the broadcast pauses
other 5xx at RCPT (5.2.x-5.6.x)                REJECTED      failed/rejected; nobody suppressed

A job sent back by SENDER_FAULT too many times fails as rejected (so it cannot loop forever).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

STAGES = ("connect", "ehlo", "starttls", "auth", "mail", "rcpt", "data")
SENDER_STAGES = frozenset({"connect", "ehlo", "starttls", "auth", "mail"})

_ENHANCED = re.compile(r"^\s*([245])\.(\d{1,3})\.(\d{1,3})\b")


class Verdict(enum.Enum):
    SENT = "sent"
    TRANSIENT = "transient"
    BOUNCE = "bounce"
    SENDER_FAULT = "sender_fault"
    REJECTED = "rejected"


# What Postgres text cannot hold besides NUL: a lone surrogate (the SMTP decoders keep a byte
# that is not UTF-8 as one, U+DC80-U+DCFF).
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Reply:
    """What one attempt ended with: a server reply, or a network error (code None).

    Its text is kept with the job, the suppression and the broadcast, so it is made storable
    here: a byte that is not UTF-8 becomes U+FFFD and NUL is dropped (a relay answering in
    Latin-1 would otherwise make its outcome impossible to write, and the outcomes of its group
    with it)."""

    stage: str
    code: int | None
    text: str

    def __post_init__(self) -> None:
        if not self.text.isascii() or "\x00" in self.text:
            text = _SURROGATE.sub("\ufffd", self.text.replace("\x00", ""))
            object.__setattr__(self, "text", text)

    @property
    def enhanced(self) -> str | None:
        """The RFC 3463 enhanced status code at the start of the text, if any."""
        m = _ENHANCED.match(self.text)
        return f"{m.group(1)}.{m.group(2)}.{m.group(3)}" if m else None

    def summary(self) -> str:
        code = f"{self.code} " if self.code is not None else ""
        return f"{self.stage}: {code}{self.text}".strip()


def judge(reply: Reply) -> Verdict:
    """Apply the table above to one reply."""
    code = reply.code
    if code is None or 400 <= code < 500:
        return Verdict.TRANSIENT
    if 200 <= code < 300:
        return Verdict.SENT if reply.stage == "data" else Verdict.TRANSIENT
    enhanced = reply.enhanced or ""
    if reply.stage in SENDER_STAGES or reply.stage == "data":
        return Verdict.SENDER_FAULT
    if reply.stage == "rcpt":
        if enhanced == "" or enhanced.startswith("5.1."):
            return Verdict.BOUNCE
        if enhanced.startswith("5.7."):
            return Verdict.SENDER_FAULT
        return Verdict.REJECTED
    return Verdict.SENDER_FAULT


@dataclass(frozen=True)
class Transition:
    """Where a job in `sending` goes next."""

    status: str  # sent | retry | failed
    failure: str | None = None  # bounced | exhausted | rejected
    delay: float = 0.0  # seconds until run_at, for retry
    count_attempt: bool = True  # False: give the claimed attempt back
    suppress: bool = False
    sender_fault: bool = False


def transition(
    verdict: Verdict,
    attempts: int,
    sender_faults: int,
    backoff: Sequence[float],
    sender_fault_limit: int,
) -> Transition:
    """The next state of a job whose attempt number `attempts` ended with `verdict`.

    `attempts` counts this attempt (it is counted at claim). Attempt k failing transiently waits
    backoff[k-1]; after len(backoff) retries the next transient failure is final.
    """
    if verdict is Verdict.SENT:
        return Transition("sent")
    if verdict is Verdict.BOUNCE:
        return Transition("failed", "bounced", suppress=True)
    if verdict is Verdict.REJECTED:
        return Transition("failed", "rejected")
    if verdict is Verdict.SENDER_FAULT:
        if sender_faults + 1 >= sender_fault_limit:
            return Transition("failed", "rejected", count_attempt=False, sender_fault=True)
        first = backoff[0] if backoff else 0.0
        return Transition("retry", delay=first, count_attempt=False, sender_fault=True)
    if attempts > len(backoff):
        return Transition("failed", "exhausted")
    return Transition("retry", delay=backoff[attempts - 1])
