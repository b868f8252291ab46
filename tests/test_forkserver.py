"""The fork server runs a command as a new interpreter would (tests/forkserver.py).

Most tests run `senddock` through it; if it answered differently from `python -m senddock`,
they would test something a user never runs. Each case here runs the same command both ways
and compares what a caller sees: exit code, stdout, stderr."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import forkserver
from conftest import Emptier
from senddock.db import connect
from support import worker_env


def interpreter(
    args: list[str], env: dict[str, str], cwd: Path, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "senddock", *args],
        env=env,
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def forked(
    args: list[str], env: dict[str, str], cwd: Path, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    here = os.getcwd()
    os.chdir(cwd)
    try:
        return forkserver.run(args, env, input=stdin)
    finally:
        os.chdir(here)


CASES = [
    ["--version"],
    ["no-such-command"],
    ["campaign", "status", "not-a-number"],
    ["lists", "show", "--json"],
    ["subscribers", "add", "not an address", "--list", "news"],
    ["subscribers", "import", "missing.csv", "--list", "news"],
    ["subscribers", "import", "people.csv", "--list", "news"],  # relative to the cwd
    ["admin", "create", "--email", "ada@example.org"],  # the password on stdin
    ["lists", "show", "news"],
]


@pytest.mark.parametrize("args", CASES, ids=lambda args: " ".join(args))
def test_a_forked_command_answers_as_a_new_interpreter_does(
    args: list[str], db_url: str, tmp_path: Path, emptier: Emptier
) -> None:
    (tmp_path / "people.csv").write_text("email,name\nzoë@example.org,Zoë\nbob@example.org,Bob\n")
    env = worker_env(db_url, "smtp://127.0.0.1:1", SENDDOCK_ALLOW_RESERVED_DOMAINS="1")
    stdin = "a password long enough\n"
    first = interpreter(args, env, tmp_path, stdin)
    # What a command says depends on the rows (an import says "2 new" only once): the second
    # run starts from the same empty database as the first.
    with connect(db_url) as conn:
        emptier.empty(conn)
    second = forked(args, env, tmp_path, stdin)
    assert (second.returncode, second.stdout, second.stderr) == (
        first.returncode,
        first.stdout,
        first.stderr,
    )


def test_the_environment_is_the_commands_own(db_url: str, tmp_path: Path) -> None:
    """A setting given to one command is not seen by the next, and a bad one fails it."""
    env = worker_env(db_url, "smtp://127.0.0.1:1")
    bad = forkserver.run(["lists", "show"], {**env, "SENDDOCK_DATABASE_URL": "postgresql://x:1/"})
    assert bad.returncode == 1 and bad.stderr.startswith("senddock: error: cannot reach"), bad
    good = forkserver.run(["lists", "show"], env)
    assert good.returncode == 0, good.stderr


def test_signals_reach_the_forked_command_as_they_reach_a_new_interpreter(
    tmp_path: Path,
) -> None:
    """SIGTERM ends a waiting command through Python's exit (the CLI's handler), SIGKILL at
    once: the same exit codes through the fork server as with Popen."""
    env = dict(os.environ)
    # `bounces ingest` reads its message from stdin: a fifo nobody writes to keeps it waiting.
    fifo = tmp_path / "in"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)  # holds the fifo open, so that reading it blocks
    try:
        codes = []
        for signum in (signal.SIGTERM, signal.SIGKILL):
            with open(fifo, "rb") as stdin, open(tmp_path / "out", "ab") as out:
                real = subprocess.Popen(
                    [sys.executable, "-m", "senddock", "bounces", "ingest"],
                    env=env,
                    stdin=stdin,
                    stdout=out,
                    stderr=out,
                )
            fork = forkserver.popen(["bounces", "ingest"], env, tmp_path / "out", stdin=fifo)
            with pytest.raises(subprocess.TimeoutExpired):
                fork.wait(2)  # both have imported and wait on stdin by now
            real.send_signal(signum)
            fork.send_signal(signum)
            codes.append((real.wait(30), fork.wait(30)))
        assert codes == [(128 + signal.SIGTERM,) * 2, (-signal.SIGKILL,) * 2]
    finally:
        os.close(writer)
