"""`senddock worker --processes N`: N worker processes under one parent, one per core.

Each child is an ordinary worker (its own row, heartbeat and lease), forked from the parent
once the parent has checked the configuration and the database, so a child starts sending
without importing anything again (a new interpreter would cost about half a second of the
one-second budget from start to first send). The parent forwards SIGTERM/SIGINT, restarts a
child that died while nobody asked it to stop, and, being the process an operator or a
supervisor signals, takes its children with it if it is killed: the kernel SIGKILLs them when
it dies (PR_SET_PDEATHSIG), so a SIGKILL of the parent is the same crash as a SIGKILL of a
single worker, and the rescuer handles it the same way.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import time
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("senddock.worker")

PR_SET_PDEATHSIG = 1
RESTART_DELAY = 1.0
FORWARDED = (signal.SIGTERM, signal.SIGINT)


def _child(parent: int, work: Callable[[], int]) -> int:
    """In a new child: die with `parent`, leave its session and its signal handlers, work."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0 or os.getppid() != parent:
        return 70  # no death signal, or the parent died before it was armed
    # Its own session: a Ctrl-C at the terminal reaches the parent alone, which forwards it
    # once (a second signal would make the child exit without finishing).
    os.setsid()
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    return work()


def run_processes(processes: int, work: Callable[[], int]) -> int:
    """Run `work` in `processes` forked children until SIGTERM or SIGINT; their worst exit code.

    Call it before any thread, event loop or database connection exists in this process.
    """
    me = os.getpid()
    stopping = False
    children: set[int] = set()

    def spawn() -> None:
        # Signals stay blocked across the fork, so the child never runs the parent's handler.
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        try:
            pid = os.fork()
            if pid == 0:
                code = 70
                try:
                    code = _child(me, work)
                except BaseException:
                    log.exception("worker process failed")
                finally:
                    logging.shutdown()
                    os._exit(code)
            children.add(pid)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)

    def forward(signum: int, _: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    for _ in range(processes):
        spawn()
    log.info("started %d worker processes: %s", processes, sorted(children))
    worst = 0
    while children:
        pid, status = os.waitpid(-1, 0)  # a forwarded signal interrupts and resumes it
        if pid not in children:
            continue
        children.discard(pid)
        code = os.waitstatus_to_exitcode(status)
        if stopping or code == 0:
            worst = max(worst, abs(code))
            continue
        log.error("worker process %d exited with %d; starting another", pid, code)
        time.sleep(RESTART_DELAY)
        if not stopping:
            spawn()
    return worst
