"""Fixtures: a real Postgres (embedded, or SENDDOCK_TEST_DATABASE_URL) and real SMTP servers."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from senddock.db import connect, migrate
from senddock.db.embedded import EmbeddedPostgres
from senddock.testing import Catcher
from support import Conn

TABLES = (
    "broadcast_jobs, broadcasts, campaigns, list_memberships, lists, subscribers, suppressions,"
    " workers"
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def smtp_sink() -> Iterator[str]:
    """Postfix's smtp-sink as an outside server; its SMTP URL."""
    exe = shutil.which("smtp-sink") or (
        "/usr/sbin/smtp-sink" if os.path.exists("/usr/sbin/smtp-sink") else None
    )
    if exe is None:
        if os.environ.get("SENDDOCK_REQUIRE_SMTP_SINK"):
            pytest.fail("smtp-sink is required (SENDDOCK_REQUIRE_SMTP_SINK) but not installed")
        pytest.skip("Postfix's smtp-sink is not installed (.ci/run installs it)")
    port = _free_port()
    cmd = [exe, "-c", f"127.0.0.1:{port}", "1000"]
    if os.geteuid() == 0:
        cmd[1:1] = ["-u", "nobody"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    try:
        yield f"smtp://127.0.0.1:{port}?tls=none"
    finally:
        proc.terminate()
        proc.wait(10)
