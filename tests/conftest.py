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

from crash_support import Fleet, Handbacks, fleet_for
from senddock.audience import addresses
from senddock.db import connect, migrate
from senddock.db.embedded import EmbeddedPostgres
from senddock.testing import Catcher
from support import Conn

# The tests' addresses are at reserved domains (.test, …), refused by default (issue 22, part 8):
# every `senddock` the tests start, and this process, accept them.
os.environ["SENDDOCK_ALLOW_RESERVED_DOMAINS"] = "1"
addresses.configure(True)

TABLES = (
    "broadcast_jobs, broadcast_counts, broadcasts, campaigns, list_memberships, lists,"
    " subscribers, suppressions, workers, api_tokens, admins, import_jobs, import_uploads,"
    " worker_deaths, sessions, login_attempts, bounce_messages, bounce_findings, bounce_effects,"
    " segments, layouts, subscription_events, signup_consents, erased_suppressions,"
    " reconcile_notes"
)


def _with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server URL: SENDDOCK_TEST_DATABASE_URL's server, or an embedded one for this run."""
    given = os.environ.get("SENDDOCK_TEST_DATABASE_URL")
    if given:
        yield given
        return
    base = Path(tempfile.mkdtemp(prefix="sdpg"))  # short path: unix socket names are limited
    server = EmbeddedPostgres(base / "pg", delete=True)
    url = server.start()
    try:
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


@pytest.fixture
def db_url(pg_url: str) -> str:
    """The test database, emptied before each test."""
    with connect(pg_url) as conn:
        conn.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")
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
