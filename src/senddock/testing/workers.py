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
from dataclasses import dataclass, field
from pathlib import Path

# A worker at -v, so its log says what it rescued and why it stopped.
WORKER = [sys.executable, "-m", "senddock", "-v", "worker"]


@dataclass(eq=False)
class WorkerProcess:
    """One `senddock worker` subprocess (with `processes` > 1, the supervisor of that many)."""

    popen: subprocess.Popen[bytes]
    name: str
    log: Path | None
    env: dict[str, str]
    concurrency: int
    processes: int = 1
    started: float = field(default_factory=time.monotonic)
    # Killed or stopped by whoever started it, not dead on its own.
    ended_on_purpose: bool = False

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
        cmd = [*WORKER, "--processes", str(processes), "--concurrency", str(concurrency)]
        with open(log, "ab") if log else contextlib.nullcontext(subprocess.DEVNULL) as out:
            popen = subprocess.Popen(
                cmd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=own_session,
            )
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
