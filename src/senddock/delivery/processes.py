"""`senddock worker --processes N`: N worker processes under one parent, one per core.

Each child is an ordinary worker (its own row, heartbeat and lease), forked from the parent
once the parent has checked the configuration and the database, so a child starts sending
without importing anything again (a new interpreter would cost about half a second of the
one-second budget from start to first send). The parent forwards SIGTERM/SIGINT, restarts a
child that died while nobody asked it to stop, and, being the process an operator or a
supervisor signals, takes its children with it if it is killed: the kernel SIGKILLs them when
it dies (PR_SET_PDEATHSIG), so a SIGKILL of the parent is the same crash as a SIGKILL of a
single worker, and the rescuer handles it the same way.

A child beats through a pipe every second while its event loop and its heartbeat task run
(`beat()`; a database outage does not stop the beats). One that has beaten once and then falls
silent for `watchdog` seconds (a loop stuck in one job's code, a heartbeat task that ended) is
SIGKILLed and replaced, not left alive and idle. How each child ended (its exit code, the signal,
the watchdog, its last words) is handed to `note`, which writes it down for its death record.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

log = logging.getLogger("senddock.worker")

PR_SET_PDEATHSIG = 1
RESTART_DELAY = 1.0
FORWARDED = (signal.SIGTERM, signal.SIGINT)
POLL = 0.5  # seconds between looks at the children's exits and beats

# In a child: the write end of its pipe to the parent (None in a process of its own).
_beat_fd: int | None = None


def beat() -> None:
    """Tell the supervisor, if there is one, that this process is alive."""
    _write(b".")


def last_words(reason: str) -> None:
    """Tell the supervisor, if there is one, why this process is about to end."""
    _write(b"!" + " ".join(reason.split()).encode()[:500] + b"\n")


def _write(data: bytes) -> None:
    if _beat_fd is not None:
        with contextlib.suppress(OSError):  # a full pipe: the parent is behind, not us
            os.write(_beat_fd, data)


@dataclass
class _Child:
    pid: int
    started: str  # its start time (rescuer.process_start), to name it in its death record
    beats: int  # read end of its pipe
    last_beat: float | None = None  # monotonic; None until its first beat (starting up)
    words: bytes = b""
    killed: str | None = None  # why the parent killed it, if it did
    buffer: bytearray = field(default_factory=bytearray)

    def read(self) -> None:
        try:
            data = os.read(self.beats, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.last_beat = time.monotonic()
            self.buffer += data
            if b"!" in self.buffer:
                said = bytes(self.buffer[self.buffer.rindex(b"!") + 1 :]).split(b"\n", 1)[0]
                self.words = said
            del self.buffer[:-600]


def _ended(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exited with code {code}"


def _child(parent: int, work: Callable[[], int], beats: int) -> int:
    """In a new child: die with `parent`, leave its session and its signal handlers, work."""
    global _beat_fd
    os.set_blocking(beats, False)
    _beat_fd = beats
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


def run_processes(
    processes: int,
    work: Callable[[], int],
    *,
    watchdog: float = 15.0,
    note: Callable[[int, str, str], None] | None = None,
) -> int:
    """Run `work` in `processes` forked children until SIGTERM or SIGINT; their worst exit code.

    `note(pid, started, reason)` is told how each child that ended unasked ended. Call this
    before any thread, event loop or database connection exists in this process.
    """
    from senddock.delivery.rescuer import process_start

    me = os.getpid()
    stopping = False
    children: dict[int, _Child] = {}

    def spawn() -> None:
        read_end, write_end = os.pipe()
        # Signals stay blocked across the fork, so the child never runs the parent's handler.
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        try:
            pid = os.fork()
            if pid == 0:
                code = 70
                try:
                    os.close(read_end)
                    for other in children.values():
                        os.close(other.beats)
                    code = _child(me, work, write_end)
                except BaseException as exc:
                    log.exception("worker process failed")
                    last_words(f"{type(exc).__name__}: {exc}")
                finally:
                    logging.shutdown()
                    os._exit(code)
            os.close(write_end)
            os.set_blocking(read_end, False)
            children[pid] = _Child(pid, process_start(pid) or "", read_end)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)

    def forward(signum: int, _: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def watch() -> None:
        """Read the beats; kill a child that has beaten and then fallen silent."""
        ready, _, _ = select.select([c.beats for c in children.values()], [], [], POLL)
        now = time.monotonic()
        for child in list(children.values()):
            if child.beats in ready:
                child.read()
            silent = child.last_beat is not None and now - child.last_beat > watchdog
            if silent and not stopping and child.killed is None:
                log.error(
                    "worker process %d has not beaten for %.0f s; killing it", child.pid, watchdog
                )
                child.killed = f"stopped heartbeating for {watchdog:.0f} s; killed and replaced"
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGKILL)

    def noted(child: _Child, code: int) -> None:
        reason = child.killed or f"worker process {_ended(code)}"
        if child.words:
            reason += ": " + child.words.decode(errors="replace")
        log.error("worker process %d: %s; starting another", child.pid, reason)
        if note is not None:
            try:
                note(child.pid, child.started, reason)
            except Exception as exc:  # the database may be what failed: log, go on
                log.warning("could not note how worker process %d ended: %s", child.pid, exc)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    for _ in range(processes):
        spawn()
    log.info("started %d worker processes: %s", processes, sorted(children))
    worst = 0
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            watch()
            continue
        child = children.pop(pid, None)
        if child is None:
            continue
        child.read()  # its last words, if any
        os.close(child.beats)
        code = os.waitstatus_to_exitcode(status)
        if stopping or (code == 0 and child.killed is None):
            worst = max(worst, abs(code))
            continue
        noted(child, code)
        time.sleep(RESTART_DELAY)
        if not stopping:
            spawn()
    return worst
