"""`senddock worker --processes N`: N worker processes under one parent, one per core.

Each child is an ordinary worker (its own row, heartbeat and lease). The parent forwards
SIGTERM/SIGINT, restarts a child that died while nobody asked it to stop, and, being the
process an operator or a supervisor signals, takes its children with it if it is killed: the
kernel SIGKILLs them when it dies (PR_SET_PDEATHSIG), so a SIGKILL of the parent is the same
crash as a SIGKILL of a single worker, and the rescuer handles it the same way.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("senddock.worker")

PR_SET_PDEATHSIG = 1
RESTART_DELAY = 1.0


def _dies_with(parent: int) -> Callable[[], None]:
    """A preexec_fn: have the kernel SIGKILL this child when `parent` dies (Linux)."""

    def arm() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
            os._exit(70)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(70)

    return arm


def run_processes(processes: int, concurrency: int, verbose: bool) -> int:
    """Run `processes` workers as children until SIGTERM or SIGINT; their worst exit code."""
    argv = [sys.executable, "-m", "senddock", *(["-v"] if verbose else [])]
    argv += ["worker", "--processes", "1", "--concurrency", str(concurrency)]
    me = os.getpid()
    stopping = False

    def spawn() -> subprocess.Popen[bytes]:
        # Its own session: a Ctrl-C at the terminal reaches the parent alone, which forwards
        # it once (a second signal would make the child exit without finishing).
        return subprocess.Popen(argv, preexec_fn=_dies_with(me), start_new_session=True)

    def forward(signum: int, _: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    children = [spawn() for _ in range(processes)]
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    log.info("started %d worker processes: %s", processes, [c.pid for c in children])
    worst = 0
    while children:
        for i, child in enumerate(children):
            code = child.poll()
            if code is None:
                continue
            if stopping or code == 0:
                worst = max(worst, abs(code))
                children.pop(i)
            else:
                log.error("worker process %d exited with %d; starting another", child.pid, code)
                time.sleep(RESTART_DELAY)
                if not stopping:
                    children[i] = spawn()
            break
        else:
            time.sleep(0.2)
    return worst
