"""The outcome rules, row by row: what one SMTP reply means for its job. Pure; no I/O.

Each test is one row of the table in senddock/delivery/outcome.py's docstring, or one step of
the retry budget. A change of verdict here is a change of who gets suppressed or retried.
"""

from __future__ import annotations

import pytest

from senddock.delivery.outcome import (
    SENDER_STAGES,
    Reply,
    Transition,
    Verdict,
    judge,
    transition,
)

# Every stage an SMTP attempt can fail at (delivery/smtp.py tags each Reply with one).
STAGES = ("connect", "ehlo", "starttls", "auth", "mail", "rcpt", "data")
BACKOFF = [30.0, 120.0, 480.0, 1800.0, 3600.0]  # the default schedule
JOB_SENDER_FAULT_LIMIT = 5  # the default Settings.job_sender_fault_limit


def after(verdict: Verdict, attempts: int = 1, sender_faults: int = 0) -> Transition:
    """The transition with the default schedule and per-job sender-fault limit."""
    return transition(verdict, attempts, sender_faults, BACKOFF, JOB_SENDER_FAULT_LIMIT)


# -- judge: the verdict for one reply -------------------------------------------------------


def test_250_after_data_is_sent() -> None:
    assert judge(Reply("data", 250, "2.0.0 OK")) is Verdict.SENT
    assert judge(Reply("data", 250, "Ok: queued as 4F2B")) is Verdict.SENT


@pytest.mark.parametrize("stage", [s for s in STAGES if s != "data"])
def test_a_2xx_before_data_never_counts_as_sent(stage: str) -> None:
    # Only the server's 250 to our DATA means the message was accepted (invariant 3).
    assert judge(Reply(stage, 250, "2.1.5 OK")) is not Verdict.SENT


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize(
    ("code", "text"),
    [
        (421, "4.3.2 service shutting down"),
        (450, "4.2.0 mailbox busy"),
        (451, "4.3.0 try again later"),
        (452, "4.5.3 too many recipients"),
        (454, "4.7.0 TLS not available"),
        (450, "greylisted, no enhanced code"),
    ],
)
def test_every_4xx_at_any_stage_is_transient(stage: str, code: int, text: str) -> None:
    assert judge(Reply(stage, code, text)) is Verdict.TRANSIENT


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize(
    "text", ["connection refused", "connection reset", "timeout", "DNS failure: [Errno -2]"]
)
def test_a_network_error_at_any_stage_is_transient(stage: str, text: str) -> None:
    assert judge(Reply(stage, None, text)) is Verdict.TRANSIENT


@pytest.mark.parametrize(
    "text",
    [
        "5.1.1 <bounce-a@example.com>: no such user",
        "5.1.0 address rejected",
        "5.1.2 bad destination system",
        "5.1.10 recipient address has null MX",
        "user unknown",  # no enhanced code: about the recipient
        "",
    ],
)
@pytest.mark.parametrize("code", [550, 551, 553])
def test_5xx_at_rcpt_with_5_1_x_or_no_enhanced_code_is_a_bounce(code: int, text: str) -> None:
    assert judge(Reply("rcpt", code, text)) is Verdict.BOUNCE


@pytest.mark.parametrize("stage", sorted(SENDER_STAGES))
@pytest.mark.parametrize(
    "text",
    [
        "5.7.1 sender not allowed",
        "5.7.8 Authentication credentials invalid",
        "5.3.2 service not available",
        "5.1.1 no such user",  # a 5.1.x before RCPT is still about us, never a bounce
        "no enhanced code",
    ],
)
def test_5xx_before_rcpt_is_the_senders_fault(stage: str, text: str) -> None:
    assert judge(Reply(stage, 554, text)) is Verdict.SENDER_FAULT


@pytest.mark.parametrize(
    "text",
    [
        "5.7.1 message rejected as spam",
        "5.6.0 content rejected",
        "5.1.1 no such user",  # after DATA the recipient was already accepted
        "message too big",
    ],
)
@pytest.mark.parametrize("code", [550, 552, 554])
def test_5xx_at_data_is_the_senders_fault(code: int, text: str) -> None:
    assert judge(Reply("data", code, text)) is Verdict.SENDER_FAULT


@pytest.mark.parametrize(
    "text", ["5.7.1 relaying denied", "5.7.0 policy", "5.7.26 DMARC failure", "5.7.606 blocked"]
)
def test_5_7_x_at_rcpt_is_the_senders_fault_not_a_bounce(text: str) -> None:
    assert judge(Reply("rcpt", 550, text)) is Verdict.SENDER_FAULT


@pytest.mark.parametrize(
    "text",
    [
        "5.2.2 mailbox full",
        "5.2.1 mailbox disabled",
        "5.3.4 message too big for system",
        "5.4.1 no answer from host",
        "5.5.1 invalid command",
        "5.6.1 media not supported",
    ],
)
def test_other_5xx_at_rcpt_is_rejected_without_suppression(text: str) -> None:
    assert judge(Reply("rcpt", 552, text)) is Verdict.REJECTED


def test_the_enhanced_code_is_read_from_the_start_of_the_reply() -> None:
    assert Reply("rcpt", 550, "5.1.1 <a@b>: no such user").enhanced == "5.1.1"
    assert Reply("rcpt", 550, "  5.7.26 DMARC").enhanced == "5.7.26"
    assert Reply("data", 250, "2.0.0 OK").enhanced == "2.0.0"
    assert Reply("rcpt", 550, "user 5.1.1 unknown").enhanced is None
    assert Reply("connect", None, "connection refused").enhanced is None


def test_a_reply_summary_names_the_stage_and_the_code() -> None:
    assert Reply("mail", 553, "5.7.1 sender not allowed").summary() == (
        "mail: 553 5.7.1 sender not allowed"
    )
    assert Reply("connect", None, "connection refused").summary() == "connect: connection refused"


# -- transition: where the job goes next ---------------------------------------------------


def test_sent_becomes_sent_and_counts_the_attempt() -> None:
    t = after(Verdict.SENT, attempts=3)
    assert (t.status, t.failure, t.count_attempt, t.suppress, t.sender_fault) == (
        "sent",
        None,
        True,
        False,
        False,
    )


def test_transient_retries_after_30s_2m_8m_30m_1h_in_turn() -> None:
    delays = []
    for attempt in range(1, 6):
        t = after(Verdict.TRANSIENT, attempts=attempt)
        assert (t.status, t.failure, t.count_attempt, t.suppress) == ("retry", None, True, False)
        delays.append(t.delay)
    assert delays == [30.0, 120.0, 480.0, 1800.0, 3600.0]


def test_a_transient_failure_after_the_fifth_retry_fails_the_job_as_exhausted() -> None:
    # Attempt 6 is the fifth retry: its failure is final.
    t = after(Verdict.TRANSIENT, attempts=6)
    assert (t.status, t.failure, t.suppress) == ("failed", "exhausted", False)
    assert after(Verdict.TRANSIENT, attempts=7).status == "failed"


def test_the_schedule_length_is_the_retry_budget() -> None:
    short = [1.0, 2.0]
    assert transition(Verdict.TRANSIENT, 1, 0, short, 5) == Transition("retry", delay=1.0)
    assert transition(Verdict.TRANSIENT, 2, 0, short, 5) == Transition("retry", delay=2.0)
    assert transition(Verdict.TRANSIENT, 3, 0, short, 5) == Transition("failed", "exhausted")
    assert transition(Verdict.TRANSIENT, 1, 0, [], 5) == Transition("failed", "exhausted")


def test_a_bounce_fails_the_job_and_suppresses_the_address() -> None:
    for attempt in (1, 4, 6):
        t = after(Verdict.BOUNCE, attempts=attempt)
        assert (t.status, t.failure, t.suppress, t.sender_fault) == (
            "failed",
            "bounced",
            True,
            False,
        )


def test_a_rejection_fails_the_job_and_suppresses_nobody() -> None:
    t = after(Verdict.REJECTED)
    assert (t.status, t.failure, t.suppress, t.sender_fault) == ("failed", "rejected", False, False)


def test_a_sender_fault_retries_gives_the_attempt_back_and_suppresses_nobody() -> None:
    for faults in range(JOB_SENDER_FAULT_LIMIT - 1):
        t = after(Verdict.SENDER_FAULT, attempts=1, sender_faults=faults)
        assert t.status == "retry"
        assert t.failure is None
        assert t.count_attempt is False
        assert t.sender_fault is True
        assert t.suppress is False
        assert t.delay == BACKOFF[0]


def test_a_sender_fault_never_exhausts_the_retry_budget() -> None:
    # The attempt is given back, so even a job on its last attempt is not failed by our fault.
    t = after(Verdict.SENDER_FAULT, attempts=6, sender_faults=0)
    assert (t.status, t.count_attempt) == ("retry", False)


def test_a_job_sent_back_by_sender_faults_too_often_fails_as_rejected() -> None:
    t = after(Verdict.SENDER_FAULT, attempts=1, sender_faults=JOB_SENDER_FAULT_LIMIT - 1)
    assert (t.status, t.failure, t.suppress, t.sender_fault, t.count_attempt) == (
        "failed",
        "rejected",
        False,
        True,
        False,
    )
    assert transition(Verdict.SENDER_FAULT, 1, 0, BACKOFF, 1).status == "failed"
    assert transition(Verdict.SENDER_FAULT, 1, 0, BACKOFF, 2).status == "retry"
    assert transition(Verdict.SENDER_FAULT, 1, 1, BACKOFF, 2).status == "failed"


def test_no_verdict_but_a_bounce_ever_suppresses() -> None:
    for verdict in Verdict:
        for attempt in range(1, 8):
            for faults in range(JOB_SENDER_FAULT_LIMIT):
                t = after(verdict, attempts=attempt, sender_faults=faults)
                assert t.suppress is (verdict is Verdict.BOUNCE)


# -- judge and transition together, as the worker applies them ------------------------------


@pytest.mark.parametrize(
    ("reply", "status", "failure", "suppress", "count_attempt"),
    [
        (Reply("data", 250, "2.0.0 OK"), "sent", None, False, True),
        (Reply("rcpt", 451, "4.3.0 try again later"), "retry", None, False, True),
        (Reply("data", 451, "4.3.0 try again later"), "retry", None, False, True),
        (Reply("connect", None, "connection refused"), "retry", None, False, True),
        (Reply("data", None, "timeout"), "retry", None, False, True),
        (Reply("rcpt", 550, "5.1.1 <a@b>: no such user"), "failed", "bounced", True, True),
        (Reply("rcpt", 550, "no such user"), "failed", "bounced", True, True),
        (Reply("mail", 553, "5.7.1 sender not allowed"), "retry", None, False, False),
        (Reply("auth", 535, "5.7.8 bad credentials"), "retry", None, False, False),
        (Reply("connect", 554, "5.3.2 not available"), "retry", None, False, False),
        (Reply("ehlo", 550, "go away"), "retry", None, False, False),
        (Reply("starttls", 554, "5.7.0 no TLS for you"), "retry", None, False, False),
        (Reply("rcpt", 550, "5.7.1 relaying denied"), "retry", None, False, False),
        (Reply("data", 554, "5.7.1 message rejected as spam"), "retry", None, False, False),
        (Reply("rcpt", 552, "5.2.2 mailbox full"), "failed", "rejected", False, True),
    ],
)
def test_each_reply_leads_the_job_where_the_table_says(
    reply: Reply, status: str, failure: str | None, suppress: bool, count_attempt: bool
) -> None:
    t = after(judge(reply), attempts=1)
    assert (t.status, t.failure, t.suppress, t.count_attempt) == (
        status,
        failure,
        suppress,
        count_attempt,
    )
