"""Fixtures: a real Postgres (embedded, or SENDDOCK_TEST_DATABASE_URL) and real SMTP servers."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

import forkserver
from crash_support import Fleet, Handbacks, fleet_for
from senddock.audience import addresses
from senddock.db import connect, migrate
from senddock.db.embedded import EmbeddedPostgres
from senddock.testing import Catcher
from senddock.testing.workers import WorkerProcess
from support import Conn

# The tests' addresses are at reserved domains (.test, …), refused by default (issue 22, part 8):
# every `senddock` the tests start, and this process, accept them.
os.environ["SENDDOCK_ALLOW_RESERVED_DOMAINS"] = "1"
addresses.configure(True)

# Every `senddock worker` the tests start through WorkerProcess is forked by the fork server.
WorkerProcess.starter = forkserver.start

TABLES = (
    "broadcast_jobs, broadcast_counts, broadcasts, campaigns, list_memberships, lists,"
    " subscribers, suppressions, workers, api_tokens, admins, import_jobs, import_uploads,"
    " worker_deaths, sessions, login_attempts, bounce_messages, bounce_findings, bounce_effects,"
    " segments, layouts, subscription_events, signup_consents, erased_suppressions,"
    " reconcile_notes"
)


# The embedded server of a test run flushes nothing to disk: a commit still reaches the kernel
# before it is acknowledged (synchronous_commit stays on), so a killed worker, a killed backend
# or a crashed postmaster loses no committed row; only the machine's own crash would, and the
# server's data folder is deleted after the run anyway. Crash tests that stop or kill Postgres
# itself run their own server (chaos_harness.py, test_cli_first_day.py), untouched.
NO_FLUSH = (
    "ALTER SYSTEM SET fsync = off",
    "ALTER SYSTEM SET full_page_writes = off",
    "SELECT pg_reload_conf()",
)


def _with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server URL: SENDDOCK_TEST_DATABASE_URL's server, or an embedded one for this run (one
    per xdist worker process: the fixture is per session, and each worker is a session)."""
    given = os.environ.get("SENDDOCK_TEST_DATABASE_URL")
    if given:
        yield given
        return
    base = Path(tempfile.mkdtemp(prefix="sdpg"))  # short path: unix socket names are limited
    server = EmbeddedPostgres(base / "pg", delete=True)
    url = server.start()
    try:
        with psycopg.connect(url, autocommit=True) as admin:
            for statement in NO_FLUSH:
                admin.execute(statement)
        yield url
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_url(pg_server: str) -> Iterator[str]:
    """A database of our own on that server, migrated once."""
    name = f"senddock_test_{secrets.token_hex(4)}"
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = _with_db(pg_server, name)
    with connect(url) as conn:
        migrate(conn)
    yield url
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Emptier:
    """What `TRUNCATE {TABLES} RESTART IDENTITY CASCADE` does, in about half its time: it
    truncates only the tables a test wrote to (a heap of 0 bytes has held no row since its
    last truncate) and restarts every sequence the full statement would. The same tables end
    empty with the same next ids (tests/test_fixtures_reset.py). After a test that sent one
    campaign: 67-126 ms against 104-211 ms for the full TRUNCATE, on the loaded 2-core box."""

    # The tables TABLES names and every table that references one (CASCADE empties those).
    CLOSURE = """
        WITH RECURSIVE t(oid) AS (
            SELECT unnest(%s::regclass[])::oid
            UNION
            SELECT c.conrelid FROM pg_constraint c JOIN t ON c.confrelid = t.oid
            WHERE c.contype = 'f'
        )
        SELECT oid FROM t
    """
    # The sequences RESTART IDENTITY restarts: those owned by (serial) or of (identity) a column.
    SEQUENCES = """
        SELECT d.objid::regclass::text AS name, s.seqstart AS start
        FROM pg_depend d JOIN pg_sequence s ON s.seqrelid = d.objid
        WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
          AND d.refobjid = ANY(%s::oid[]) AND d.deptype IN ('a', 'i')
    """
    WRITTEN = (
        "SELECT relname FROM pg_class WHERE oid = ANY(%s::oid[]) AND pg_relation_size(oid) > 0"
    )
    RESTART = "SELECT setval(name::regclass, start, false) FROM unnest(%s::text[], %s::bigint[])"
    RESTART += " AS s(name, start)"

    def __init__(self, conn: Conn) -> None:
        names = [t.strip() for t in TABLES.split(",")]
        self.tables = [int(r["oid"]) for r in conn.execute(self.CLOSURE, (names,)).fetchall()]
        seqs = conn.execute(self.SEQUENCES, (self.tables,)).fetchall()
        self.sequences = ([str(r["name"]) for r in seqs], [int(r["start"]) for r in seqs])

    def empty(self, conn: Conn) -> None:
        written = [str(r["relname"]) for r in conn.execute(self.WRITTEN, (self.tables,))]
        with conn.transaction():
            if written:
                tables = sql.SQL(", ").join(sql.Identifier(name) for name in written)
                conn.execute(sql.SQL("TRUNCATE {} CASCADE").format(tables))
            conn.execute(self.RESTART, self.sequences)


@pytest.fixture(scope="session")
def emptier(pg_url: str) -> Emptier:
    with connect(pg_url) as conn:
        return Emptier(conn)


@pytest.fixture
def db_url(pg_url: str, emptier: Emptier) -> str:
    """The test database, emptied before each test."""
    with connect(pg_url) as conn:
        emptier.empty(conn)
    return pg_url


@pytest.fixture
def conn(db_url: str) -> Iterator[Conn]:
    with connect(db_url) as c:
        yield c


@pytest.fixture
def catcher() -> Iterator[Catcher]:
    """aiosmtpd in this process, with per-recipient faults by address convention."""
    with Catcher() as c:
        yield c


@pytest.fixture
def fleet(request: pytest.FixtureRequest, tmp_path: Path, db_url: str) -> Iterator[Fleet]:
    """Worker processes (5 senders each) with their logs in tmp_path, printed if a test failed."""
    yield from fleet_for(request, tmp_path, 5)


@pytest.fixture
def handbacks(conn: Conn) -> Iterator[Handbacks]:
    """Record every job given back (rescued or released) while the test runs."""
    yield from Handbacks.installed(conn)


# `python3 dev.py test --fast` (issue 36): the unit and queue tests, in under 2 minutes on a
# quiet 2-core machine. Chosen by file here, in one place, so no test file carries a mark for
# it. Left out: whatever runs the CLI or a web server per test, and big imports.
FAST = frozenset(
    {
        # the queue: its statements, their plans, the model, group commit, counts, liveness
        "test_queue_layer.py",
        "test_claim_plan.py",
        "test_named_sql.py",
        "test_queue_model.py",
        "test_finish.py",
        "test_group_commit.py",
        "test_counts.py",
        "test_unconfirmed.py",
        "test_liveness.py",
        "test_backoff_schedule.py",
        "test_dot_log.py",
        "test_table_health.py",
        "test_fixtures_reset.py",
        # units: outcome rules, SMTP transport and catcher, message bytes, bounce reading
        "test_outcome_rules.py",
        "test_durations.py",
        "test_smtp_transport.py",
        "test_aiosmtplib_handover.py",
        "test_catcher.py",
        "test_reply_bytes.py",
        "test_relay_delay.py",
        "test_messages_headers.py",
        "test_bounce_providers.py",
        "test_bounce_verp.py",
        "test_bounce_verdicts.py",
        "test_bounce_listener.py",
    }
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="only the unit and queue tests (FAST in tests/conftest.py), under 2 minutes",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--fast"):
        slow = [item for item in items if item.path.name not in FAST]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if item.path.name in FAST]
