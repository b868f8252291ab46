"""The chaos suite at small sizes: each fault against a real broadcast, counted at the server.

Every scenario runs real `senddock worker` processes against its own database on an embedded
Postgres that the harness can stop, restart and kill, and an in-process SMTP server that counts
what it accepted. `bench/chaos.py --all` runs the same scenarios at full size.
"""

from __future__ import annotations

import smtplib
from collections.abc import Iterator

import pytest

from chaos_harness import Harness, Result, address

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    """One embedded Postgres for the module; each scenario gets a fresh database on it."""
    h = Harness().start()
    try:
        yield h
    finally:
        h.stop()  # keeps the worker logs if a scenario failed


def proved(result: Result) -> None:
    """Nobody undelivered, duplicates within bound (none unless SIGKILLed), every check held."""
    detail = "\n".join(
        [f"  problem: {p}" for p in result.problems]
        + [f"  note: {n}" for n in result.notes]
        + [f"  logs: {result.logs}"]
    )
    assert result.finished, f"{result.scenario} did not finish\n{detail}"
    assert result.undelivered == 0, f"{result.undelivered} undelivered\n{detail}"
    assert result.duplicates <= result.duplicates_allowed, (
        f"{result.duplicates} duplicates, {result.duplicates_allowed} allowed\n{detail}"
    )
    assert not result.problems, detail
    # Every recipient expected got one copy or is shown unconfirmed (`undelivered` above counts
    # the others); the catcher had at most every unconfirmed one (issue 23).
    assert 0 <= result.unconfirmed_accepted <= result.unconfirmed
    assert result.ok


def test_worker_killed_mid_broadcast_loses_nobody(harness: Harness) -> None:
    result = harness.run("crash_recovery", small=True)
    proved(result)
    # By default no duplicate: at most one unconfirmed message for each of the 5 SMTP sessions
    # in flight at the SIGKILL (issue 23).
    assert result.duplicates_allowed == 0 and result.duplicates == 0
    assert result.unconfirmed <= 5


def test_repeated_kills_across_a_broadcast_lose_nobody(harness: Harness) -> None:
    result = harness.run("repeated_kills", small=True)
    proved(result)
    assert result.faults == 5


def test_rolling_restart_sends_nobody_twice(harness: Harness) -> None:
    result = harness.run("rolling_restart", small=True)
    proved(result)
    assert result.duplicates_allowed == 0 and result.duplicates == 0


def test_postgres_restart_mid_broadcast_loses_and_duplicates_nobody(harness: Harness) -> None:
    result = harness.run("postgres_restart", small=True)
    proved(result)
    assert result.duplicates == 0


def test_killed_database_sessions_lose_and_duplicate_nobody(harness: Harness) -> None:
    result = harness.run("pg_backend_kill", small=True)
    proved(result)
    assert result.duplicates == 0


def test_database_blackout_longer_than_the_lease_declares_nobody_dead(harness: Harness) -> None:
    """No worker dies, so nobody may be sent twice (README: duplicates only when a process
    dies), even though every heartbeat lapsed while the database turned them all away."""
    result = harness.run("db_blackout", small=True)
    proved(result)
    assert result.duplicates == 0


def test_smtp_outage_waits_on_the_schedule_and_senders_back_off(harness: Harness) -> None:
    proved(harness.run("smtp_outage", small=True))


def test_stalled_smtp_server_is_retried_without_wedging_the_worker(harness: Harness) -> None:
    proved(harness.run("smtp_stall", small=True))


def test_relay_rejecting_us_pauses_the_broadcast_and_suppresses_nobody(harness: Harness) -> None:
    proved(harness.run("sender_fault", small=True))


def test_slow_live_owner_keeps_its_jobs_and_dead_owner_is_rescued(harness: Harness) -> None:
    proved(harness.run("stuck_owner", small=True))


def test_retry_storm_ends_all_sent_with_every_retry_on_schedule(harness: Harness) -> None:
    proved(harness.run("retry_storm", small=True))


def test_bad_input_is_refused_in_one_line_and_the_queued_broadcast_completes(
    harness: Harness,
) -> None:
    proved(harness.run("bad_input", small=True))


def test_a_job_that_kills_every_worker_fails_alone_and_costs_nobody_an_attempt(
    harness: Harness,
) -> None:
    proved(harness.run("poison", small=True))


def test_the_harness_counts_duplicates_and_losses_at_the_server(harness: Harness) -> None:
    """The proof is only as good as the counting: a copy too many and a recipient missing,
    delivered by hand, must each show and fail the run."""
    w = harness.world("self_check", True, 3)
    with w, smtplib.SMTP(w.catcher.host, w.catcher.port) as smtp:
        for rcpt in (address(1), address(1), address(2)):
            smtp.sendmail("chaos@example.org", [rcpt], b"Message-ID: <same@x>\r\n\r\nhi\r\n")
    result = w.result
    assert result is not None
    assert (result.delivered_once, result.duplicates, result.undelivered) == (1, 1, 1)
    assert not result.ok
    assert any("not explained by a SIGKILL" in p for p in result.problems), result.problems
