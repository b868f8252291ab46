"""`senddock worker --processes N`: N worker processes under one light parent, one per core.

The parent, the supervisor, imports the standard library alone (this module and
senddock/supervisor.py, the program `senddock worker` execs once click has read its options):
it sends nothing, so it holds none of what a worker needs (Pydantic, psycopg, Jinja2, the event
loop: about 30 MB of a worker's 43 MB), and no worker forked from it holds the command line.
What needs them runs in forked children. A launcher runs `prepare` once (the configuration and
the database checked, a bad one said in one line; the worker's imports loaded), forks the first
workers and exits: they share its pages, and the supervisor, their subreaper, adopts them. A
replacement for a worker that died is forked by the supervisor and imports what it needs
itself (about 0.3 s of CPU). `note` writes a death down from a short-lived child of its own.
bench/worker_memory.py measures the tree (docs/measurements.md, 2026-12-07).

The parent forwards SIGTERM/SIGINT, restarts a
child that died while nobody asked it to stop, and, being the process an operator or a
supervisor signals, takes its children with it if it is killed: the kernel SIGKILLs them when
it dies (PR_SET_PDEATHSIG), so a SIGKILL of the parent is the same crash as a SIGKILL of a
single worker, and the rescuer handles it the same way.

A child beats through a pipe every second while its event loop and its heartbeat task run
(`beat()`; a database outage does not stop the beats). One that has beaten once and then falls
silent for `watchdog` seconds (its lease, which the child announces with `announce()` once it has
read its settings; a loop stuck in one job's code, a heartbeat task that ended) is
SIGKILLed and replaced, not left alive and idle. How each child ended (its exit code, the signal,
the watchdog, its last words) is handed to `note`, which writes it down for its death record.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("senddock.worker")

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
RESTART_DELAY = 1.0
FORWARDED = (signal.SIGTERM, signal.SIGINT)
POLL = 0.5  # seconds between looks at the children's exits and beats

# In a child: the write end of its pipe to the parent (None in a process of its own).
_beat_fd: int | None = None


def process_start(pid: int) -> str | None:
    """The start time of process `pid` in clock ticks since boot, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[19]  # field 22 of stat(5), counting from the one after the command name


def announce(watchdog: float) -> None:
    """Tell the supervisor, if there is one, after how many silent seconds to replace us."""
    _write(b"~%r\n" % float(watchdog))


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


class _Child:
    """A worker process as the supervisor watches it. A plain class, not a dataclass: the
    supervisor imports no more than it must (dataclasses loads inspect: 0.7 MB of its RSS)."""

    def __init__(self, pid: int, started: str, beats: int) -> None:
        self.pid = pid
        self.started = started  # its start time (process_start), to name it when it dies
        self.beats = beats  # read end of its pipe
        self.last_beat: float | None = None  # monotonic; None until its first beat
        self.words = b""
        self.killed: str | None = None  # why the parent killed it, if it did
        self.watchdog: float | None = None  # silent seconds before it is replaced (announce())
        self.buffer = bytearray()

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
            self._announced()
            if b"!" in self.buffer:
                said = bytes(self.buffer[self.buffer.rindex(b"!") + 1 :]).split(b"\n", 1)[0]
                self.words = said
            del self.buffer[:-600]

    def _announced(self) -> None:
        """Take its watchdog period out of the stream (`~15.0\\n`), once the line is whole."""
        start = self.buffer.find(b"~")
        end = self.buffer.find(b"\n", start)
        if self.watchdog is not None or start < 0 or end < 0 or b"!" in self.buffer[:start]:
            return
        with contextlib.suppress(ValueError):
            self.watchdog = float(self.buffer[start + 1 : end])
        del self.buffer[start : end + 1]


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
    if not _die_with(parent):
        return 70  # no death signal, or the parent died before it was armed
    # Its own session: a Ctrl-C at the terminal reaches the parent alone, which forwards it
    # once (a second signal would make the child exit without finishing).
    os.setsid()
    # Until `work` installs its own handlers (runtime.run_worker, before any claim), a stop
    # finds nothing held: exit 0 at once, as a worker stopped between jobs does. A replacement
    # worker imports everything first, long enough for a stop to land there (SIG_DFL made
    # its exit -15, the command's 15).
    for sig in FORWARDED:
        signal.signal(sig, _stopped_before_work)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    return work()


def _stopped_before_work(signum: int, frame: FrameType | None) -> None:
    os._exit(0)


def _worker_child(parent: int, work: Callable[[], int], beats: int, others: list[int]) -> None:
    """The body of a forked worker: close what is not its own, work, and never return."""
    code = 70
    try:
        for fd in others:
            os.close(fd)
        code = _child(parent, work, beats)
    except BaseException as exc:
        log.exception("worker process failed")
        last_words(f"{type(exc).__name__}: {exc}")
    finally:
        logging.shutdown()
        os._exit(code)


def _adopted_by(parent: int, timeout: float = 10.0) -> bool:
    """In a worker forked by the launcher: wait until the launcher has exited and `parent`,
    the subreaper, has become our parent."""
    deadline = time.monotonic() + timeout
    while os.getppid() != parent:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _die_with(parent: int) -> bool:
    """Ask the kernel to SIGKILL this process when `parent` dies; False if it cannot."""
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) == 0 and os.getppid() == parent)


def _trim_heap() -> None:
    """Give the C heap's free pages back to the kernel (glibc's malloc_trim; elsewhere
    nothing): what imports and checks allocated and freed stays resident otherwise, and every
    process forked next inherits it and counts it in its RSS (about 0.7 MB in the supervisor
    and in each worker, bench/worker_memory.py)."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


def _default_signals() -> None:
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def in_child(task: Callable[[], object], *, at_exit: bool = False) -> None:
    """Run `task` in a forked child, so that what it imports stays out of this process.

    Returns once it has returned in the child. An exception it raises goes on up the child's
    own stack, so the command line prints it in one line and the child exits with that code:
    this process then exits with the same code, having said nothing more. `at_exit`: the child
    then ends as a process normally does, its atexit handlers run (the embedded Postgres's).
    """
    me = os.getpid()
    pid = os.fork()
    if pid == 0:
        if not _die_with(me):
            os._exit(70)
        task()  # raises in the child: its caller reports it and exits
        if at_exit:
            sys.exit(0)
        _flush()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(abs(code) if code > 0 else 128 - code)


def _scribe(note: Callable[[int, str, str], None], pid: int, started: str, reason: str) -> int:
    """Fork a short-lived child that writes down how child `pid` ended; its pid."""
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    try:
        scribe = os.fork()
        if scribe == 0:
            code = 1
            try:
                _default_signals()
                note(pid, started, reason)
                code = 0
            except BaseException as exc:  # the database may be what failed: log, go on
                log.warning("could not note how worker process %d ended: %s", pid, exc)
            finally:
                logging.shutdown()
                _flush()
                os._exit(code)
        return scribe
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)


def run_processes(
    processes: int,
    work: Callable[[], int],
    *,
    prepare: Callable[[], object] | None = None,
    watchdog: float | None = None,
    note: Callable[[int, str, str], None] | None = None,
) -> int:
    """Run `work` in `processes` forked children until SIGTERM or SIGINT; their worst exit code.

    The first children are forked by a launcher, a child of this process that runs `prepare`
    (checks, imports) once and exits: they share what it loaded, and become this process's
    children (it is their subreaper). If `prepare` raises, the launcher reports it as the
    command line does and exits, and this raises SystemExit with its code. A child that dies
    unasked is replaced by one forked from here, which imports what it needs itself.

    A child that has beaten once and then falls silent for `watchdog` seconds (or the period it
    announced) is killed and replaced. `note(pid, started, reason)` is told, in a forked child
    of its own, how each child that ended unasked ended. Call this before any thread, event
    loop or database connection exists in this process.
    """
    me = os.getpid()
    stopping = False
    asked = 0  # the signal that asked us to stop
    children: dict[int, _Child] = {}
    scribes: set[int] = set()
    libc = ctypes.CDLL(None, use_errno=True)
    subreaper = libc.prctl(PR_SET_CHILD_SUBREAPER, 1) == 0
    _trim_heap()  # what this process's imports left: it lives as long as the command

    def launch(n: int) -> None:
        """Fork the launcher; take its `n` workers as our children."""
        pipes = [os.pipe() for _ in range(n)]
        report, told = os.pipe()
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        try:
            launcher = os.fork()
            if launcher == 0:
                os.close(report)
                for read_end, _ in pipes:
                    os.close(read_end)
                if not _die_with(me):
                    os._exit(70)
                _default_signals()
                if prepare is not None:
                    prepare()  # raises in the launcher: its caller reports it and exits
                _trim_heap()  # what `prepare` left, before the workers inherit it
                gc.freeze()  # what it loaded stays shared: the workers' collector skips it
                # Blocked again across the forks: a worker takes a stop only once its own
                # handler is in (_child); until then (its adoption may take a while) a
                # SIGTERM waits, and is not a death by signal (the command's exit 15).
                signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
                for i, (_, write_end) in enumerate(pipes):
                    pid = os.fork()
                    if pid == 0:
                        for fd in [told] + [w for j, (_, w) in enumerate(pipes) if j != i]:
                            os.close(fd)
                        if not _adopted_by(me):
                            os._exit(70)
                        _worker_child(me, work, write_end, [])
                    os.write(told, b"%d\n" % pid)
                _flush()
                os._exit(0)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        os.close(told)
        for _, write_end in pipes:
            os.close(write_end)
        said = b""
        while chunk := os.read(report, 4096):
            said += chunk
        os.close(report)
        _, status = os.waitpid(launcher, 0)
        pids = [int(p) for p in said.split()]
        code = os.waitstatus_to_exitcode(status)
        if not pids and code != 0:
            for read_end, _ in pipes:
                os.close(read_end)
            raise SystemExit(code if code > 0 else 128 - code)
        for pid, (read_end, _) in zip(pids, pipes, strict=False):
            os.set_blocking(read_end, False)
            children[pid] = _Child(pid, process_start(pid) or "", read_end)
        for read_end, _ in pipes[len(pids) :]:  # the launcher died half-way: fork the rest
            os.close(read_end)
            spawn()

    def spawn() -> None:
        read_end, write_end = os.pipe()
        # Signals stay blocked across the fork, so the child never runs the parent's handler.
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        try:
            pid = os.fork()
            if pid == 0:
                _worker_child(
                    me, work, write_end, [read_end, *(c.beats for c in children.values())]
                )
            os.close(write_end)
            os.set_blocking(read_end, False)
            children[pid] = _Child(pid, process_start(pid) or "", read_end)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)

    def forward(signum: int, _: FrameType | None) -> None:
        nonlocal stopping, asked
        stopping = True
        asked = signum
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
            period = child.watchdog or watchdog
            if period is None or child.last_beat is None or stopping or child.killed:
                continue
            if now - child.last_beat > period:
                log.error(
                    "worker process %d has not beaten for %.0f s; killing it", child.pid, period
                )
                child.killed = f"stopped heartbeating for {period:.0f} s; killed and replaced"
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGKILL)

    def noted(child: _Child, code: int) -> None:
        reason = child.killed or f"worker process {_ended(code)}"
        if child.words:
            reason += ": " + child.words.decode(errors="replace")
        log.error("worker process %d: %s; starting another", child.pid, reason)
        if note is not None:
            scribes.add(_scribe(note, child.pid, child.started, reason))

    for sig in FORWARDED:
        signal.signal(sig, forward)
    if subreaper:
        launch(processes)
    else:
        if prepare is not None:
            in_child(prepare)
        for _ in range(processes):
            spawn()
    if stopping:  # asked while the launcher was preparing: tell the workers it forked
        forward(asked, None)
    log.info("started %d worker processes: %s", processes, sorted(children))
    worst = 0
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            watch()
            continue
        child = children.pop(pid, None)
        if child is None:
            scribes.discard(pid)
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
    for scribe in scribes:  # a death being written down: bounded by its connect timeout
        with contextlib.suppress(ChildProcessError):
            os.waitpid(scribe, 0)
    return worst
