"""`senddock worker` subprocesses for the demo, the chaos harness and the tests.

One way to start one (its output in a log file), SIGKILL it (it dies wherever it is, with no
chance to clean up) or stop it with SIGTERM (a graceful exit), and read its log.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

# A worker at -v, so its log says what it rescued and why it stopped.
WORKER = ["-v", "worker"]


class Process(Protocol):
    """What a started process gives: subprocess.Popen's part that WorkerProcess uses."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...

    def terminate(self) -> None: ...


# How to start `senddock ARGS`: (args, env, log or None, own session) -> the process.
Starter = Callable[[list[str], dict[str, str], Path | None, bool], Process]


def interpreter(args: list[str], env: dict[str, str], log: Path | None, own: bool) -> Process:
    """`python -m senddock ARGS` in a new interpreter, its output appended to `log`."""
    with open(log, "ab") if log else contextlib.nullcontext(subprocess.DEVNULL) as out:
        return subprocess.Popen(
            [sys.executable, "-m", "senddock", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=own,
        )


@dataclass(eq=False)
class WorkerProcess:
    """One `senddock worker` subprocess (with `processes` > 1, the supervisor of that many)."""

    popen: Process
    name: str
    log: Path | None
    env: dict[str, str]
    concurrency: int
    processes: int = 1
    started: float = field(default_factory=time.monotonic)
    # Killed or stopped by whoever started it, not dead on its own.
    ended_on_purpose: bool = False
    # How every WorkerProcess is started: a new interpreter; the tests fork theirs from a
    # process that has imported senddock already (tests/forkserver.py).
    starter: ClassVar[Starter] = interpreter

    @classmethod
    def start(
        cls,
        env: dict[str, str],
        *,
        log: Path | None = None,
        name: str = "worker",
        concurrency: int = 5,
        processes: int = 1,
        own_session: bool = False,
    ) -> WorkerProcess:
        """Start it with `env`, its output appended to `log` (None: discarded). `own_session`:
        in a session of its own, so a Ctrl-C at the terminal reaches only its starter."""
        args = [*WORKER, "--processes", str(processes), "--concurrency", str(concurrency)]
        popen = WorkerProcess.starter(args, env, log, own_session)
        return cls(popen, name, log, env, concurrency, processes)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    @property
    def appname(self) -> str:
        """Its database sessions' application_name (PGAPPNAME), if it was given one."""
        return self.env.get("PGAPPNAME", "")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self, timeout: float = 30.0) -> None:
        """SIGKILL and reap it (so no zombie looks alive to a rescuer)."""
        self.ended_on_purpose = True
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait: the exit code; None if it outlived `timeout` and was SIGKILLed."""
        self.ended_on_purpose = True
        self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(30)
            return None

    def text(self) -> str:
        """Its log so far."""
        if self.log is None:
            return ""
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def last_lines(self, n: int = 2) -> str:
        """Its log's last `n` lines, on one line."""
        return " | ".join(self.text().strip().splitlines()[-n:])
