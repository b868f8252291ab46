"""A first day with `senddock`: what it says at start, -v, --help, --version, SIGTERM on the
embedded database, tokens and admins, counts in words, and imports that say what happened.

Real processes against the test database (or an embedded Postgres of the test's own).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from senddock.db.embedded import pg_ctl
from support import senddock, worker_env

NO_SMTP = "smtp://127.0.0.1:9?tls=none"
HANDLE_FILE = ".handle_pids.json"  # pgserver's list of the processes using a server


def env_without(env: dict[str, str], *names: str) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in names}


# -- 1. what worker and serve say at start -------------------------------------------------


# -- 3. SIGTERM stops the embedded Postgres; dead handles are forgotten ---------------------


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data dir for an embedded Postgres of this test's own; its server stopped at the end."""
    base = Path(tempfile.mkdtemp(prefix="sdfd"))  # short: unix socket paths are limited
    try:
        yield base
    finally:
        if (base / "pgdata" / "postmaster.pid").exists():
            pg_ctl(base / "pgdata", "stop", "-m", "immediate")
        shutil.rmtree(base, ignore_errors=True)


def embedded_env(data_dir: Path) -> dict[str, str]:
    env = worker_env("", NO_SMTP, SENDDOCK_DATA_DIR=str(data_dir))
    return env_without(env, "SENDDOCK_DATABASE_URL", "SENDDOCK_SMTP_URL", "SENDDOCK_PUBLIC_URL")


def postmaster_running(data_dir: Path) -> bool:
    found = subprocess.run(
        ["pgrep", "-f", f"postgres -D {data_dir}/pgdata"], capture_output=True, text=True
    )
    return bool(found.stdout.strip())


def handles(data_dir: Path) -> list[int]:
    path = data_dir / "pgdata" / HANDLE_FILE
    return list(json.loads(path.read_text() or "[]")) if path.exists() else []


def test_a_dead_process_left_in_the_handle_file_does_not_keep_postgres_running(
    data_dir: Path,
) -> None:
    env = embedded_env(data_dir)
    assert senddock(env, "migrate", timeout=120).returncode == 0
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid nobody has now: a process SIGKILLed before its cleanup ran
    (data_dir / "pgdata" / HANDLE_FILE).write_text(json.dumps([dead.pid]))
    done = senddock(env, "subscribers", "add", "ada@example.org", timeout=120)
    assert done.returncode == 0, done.stderr
    assert not postmaster_running(data_dir), "a stale handle kept the embedded Postgres running"
    assert handles(data_dir) == []


# -- 2. -v shows tracebacks ---------------------------------------------------------------


# -- 4. --version, help for every option, settings in --help -------------------------------


# -- 5. tokens and admins -------------------------------------------------------------------


# -- 6, 7, 8. counts in words, suppressed shown, imports that say what happened -------------
