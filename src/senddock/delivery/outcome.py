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
the final dot went, then no reply: the         UNCONFIRMED   unconfirmed: never resent on its
  connection dropped or timed out (RFC 1047)                 own; a person resends or confirms
  (stage "dot")                                              (TRANSIENT with
                                                             SENDDOCK_UNCONFIRMED=resend)

A job sent back by SENDER_FAULT too many times fails as rejected (so it cannot loop forever).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from senddock.smtp.reply import Reply

__all__ = ["SENDER_STAGES", "Reply", "Transition", "Verdict", "judge", "transition"]
SENDER_STAGES = frozenset({"connect", "ehlo", "starttls", "auth", "mail"})


class Verdict(enum.Enum):
    SENT = "sent"
    TRANSIENT = "transient"
    BOUNCE = "bounce"
    SENDER_FAULT = "sender_fault"
    REJECTED = "rejected"
    UNCONFIRMED = "unconfirmed"


def judge(reply: Reply) -> Verdict:
    """Apply the table above to one reply."""
    code = reply.code
    if code is None and reply.stage == "dot":
        return Verdict.UNCONFIRMED
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

    status: str  # sent | retry | failed | unconfirmed
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
    if verdict is Verdict.UNCONFIRMED:
        return Transition("unconfirmed")
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
