"""`python -m senddock ...` for the tests, without paying its imports each time.

Every `senddock` command a test runs used to start a new interpreter and import what the
command imports: 0.3 s of CPU for `campaign create`, 1.6 s for `serve` (FastAPI, Pydantic's
models, the dashboard). Over a run that was most of the suite's CPU on a 2-core machine.

A fork server, one per test process, imports all of that once. For each command it forks a
handler, which forks the command itself: a real process of its own (its pid, its environment,
its working directory, its stdin, stdout and stderr, its signals, its exit code and its atexit
work), only not re-imported. The handler waits for it and tells the test its exit status.

What differs from a fresh interpreter, and why that is fine for what the tests run through it:
- Modules are imported before the command's environment is set. SendDock reads its settings
  when a command runs, not on import; the two test hooks read on import (SENDDOCK_TEST_KILL_ON,
  SENDDOCK_TEST_KILL_POLL) are set again in the child (`_rearm`).
- Interpreter options from the environment (PYTHON*) are the server's. No test sets one for
  these commands.
- Tests about the process itself (what it imports, its memory, the worker supervisor) start a
  real interpreter: they do not use this.

    python tests/forkserver.py SOCKET   # serves until its parent (the test process) exits
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Request:
    """One command: its argv after `senddock`, its environment and where its streams go.
    Sent as a dict (the server runs this file as __main__)."""

    args: tuple[str, ...]
    env: dict[str, str]
    cwd: str
    stdin: str | None  # a file's path, or None for /dev/null
    stdout: str  # a file's path
    stderr: str | None  # a file's path, or None: the same as stdout
    new_session: bool = False


# --- the server side ----------------------------------------------------------------------------


def _preload() -> None:
    """What the commands import, loaded once before any fork."""
    import importlib

    import senddock.runtime
    import senddock.web.app  # noqa: F401
    from senddock.cli.root import COMMANDS

    for where in COMMANDS.values():
        importlib.import_module(where.split(":")[0])
    with contextlib.suppress(ImportError):
        import uvloop  # noqa: F401


def _rearm() -> None:
    """The test hooks that SendDock reads from the environment on import, read again."""
    from senddock.bounces import poll
    from senddock.delivery import sender

    sender.KILL_ON = os.environ.get("SENDDOCK_TEST_KILL_ON") or None
    poll.KILL_POLL = os.environ.get("SENDDOCK_TEST_KILL_POLL") or None


def _command(req: Request) -> None:
    """The body of the forked command: set its process up as an interpreter would, run
    `senddock` and exit as `python -m senddock` would. Never returns."""
    code = 1
    try:
        if req.new_session:
            os.setsid()
        for signum in (signal.SIGTERM, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(req.cwd)
        stdin = os.open(req.stdin or os.devnull, os.O_RDONLY)
        stdout = os.open(req.stdout, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        stderr = (
            os.open(req.stderr, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            if req.stderr
            else stdout
        )
        for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(fd, target)
        os.environ.clear()
        os.environ.update(req.env)
        _rearm()
        sys.argv = [str(ROOT / "src" / "senddock" / "__main__.py"), *req.args]
        from senddock.cli import main

        try:
            main()
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except KeyboardInterrupt:
            code = 128 + signal.SIGINT
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter's exit does
        atexit._run_exitfuncs()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def _handle(conn: Connection) -> None:
    """In a handler: fork the command, say its pid, wait for it and say how it ended."""
    req = Request(**conn.recv())
    pid = os.fork()
    if pid == 0:
        conn.close()
        _command(req)
    conn.send(pid)
    _, status = os.waitpid(pid, 0)
    conn.send(os.waitstatus_to_exitcode(status))


def serve(address: str) -> None:
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: end with the test process
    _preload()
    parent = os.getppid()
    listener = Listener(address, family="AF_UNIX")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers reap themselves
    print("ready", flush=True)
    while True:
        conn = listener.accept()
        if os.getppid() != parent:
            os._exit(0)
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                _handle(conn)
            finally:
                os._exit(0)
        conn.close()


# --- the test side ------------------------------------------------------------------------------


class Server:
    """The fork server of this test process, started on first use."""

    _lock = threading.Lock()
    _proc: subprocess.Popen[str] | None = None
    _address = ""

    _ready = False

    @classmethod
    def start(cls) -> None:
        """Start it, if it is not running, and return at once (it imports for a second)."""
        with cls._lock:
            if cls._proc is None:  # the first start: one exit hook for every later one
                atexit.register(cls._stop)
            if cls._proc is None or cls._proc.poll() is not None:
                folder = tempfile.mkdtemp(prefix="sdfork")
                cls._address = os.path.join(folder, "s")
                cls._proc = subprocess.Popen(
                    [sys.executable, __file__, cls._address],
                    cwd="/",  # each command is given its own
                    stdout=subprocess.PIPE,
                    stdin=subprocess.DEVNULL,
                    text=True,
                )
                cls._ready = False

    @classmethod
    def address(cls) -> str:
        """Its socket, once it is ready."""
        cls.start()
        with cls._lock:
            assert cls._proc is not None and cls._proc.stdout is not None
            if not cls._ready:
                line = cls._proc.stdout.readline()
                if line.strip() != "ready":
                    raise RuntimeError(f"the fork server did not start: {line!r}")
                cls._ready = True
            return cls._address

    @classmethod
    def _stop(cls) -> None:
        if cls._proc is not None and cls._proc.poll() is None:
            cls._proc.kill()
            cls._proc.wait()


class Forked:
    """A `senddock` command forked by the fork server: what a subprocess.Popen gives a test
    (pid, poll, wait, send_signal, kill, terminate, returncode)."""

    def __init__(self, req: Request) -> None:
        self._conn = Client(Server.address(), family="AF_UNIX")
        self._conn.send(dataclasses.asdict(req))
        self.pid: int = self._conn.recv()
        self.args = ["senddock", *req.args]
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self._conn.poll(0):
            self._ended()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not self._conn.poll(timeout):
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._ended()
        assert self.returncode is not None
        return self.returncode

    def _ended(self) -> None:
        self.returncode = int(self._conn.recv())
        self._conn.close()

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def popen(
    args: tuple[str, ...] | list[str],
    env: dict[str, str],
    out: Path,
    *,
    err: Path | None = None,
    stdin: Path | None = None,
    new_session: bool = False,
) -> Forked:
    """Start `senddock ARGS` with `env`, its stdout appended to `out` (its stderr too, unless
    `err`)."""
    for path in (out, err):  # there at once, as subprocess.Popen's parent opens them
        if path is not None and str(path) != os.devnull:
            path.touch(exist_ok=True)
    req = Request(
        tuple(args),
        dict(env),
        os.getcwd(),
        str(stdin) if stdin else None,
        str(out),
        str(err) if err else None,
        new_session,
    )
    return Forked(req)


def start(args: list[str], env: dict[str, str], log: Path | None, own: bool) -> Forked:
    """A WorkerProcess.starter: `senddock ARGS` forked, its output appended to `log`."""
    return popen(args, env, log or Path(os.devnull), new_session=own)


def run(
    args: tuple[str, ...] | list[str],
    env: dict[str, str],
    *,
    input: str | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """What `subprocess.run([python, -m, senddock, *args], capture_output=True, text=True)`
    gives, through the fork server."""
    with tempfile.TemporaryDirectory(prefix="sdrun") as folder:
        where = Path(folder)
        stdin = None
        if input is not None:
            stdin = where / "in"
            stdin.write_text(input)
        out, err = where / "out", where / "err"
        proc = popen(args, env, out, err=err, stdin=stdin)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        return subprocess.CompletedProcess(
            ["senddock", *args],
            int(proc.returncode or 0),
            _read(out),
            _read(err),
        )


def _read(path: Path) -> str:
    """A stream as `text=True` gives it: decoded, with universal newlines."""
    if not path.exists():
        return ""
    # Strict, as subprocess's text mode: a command that wrote bytes that are not UTF-8 fails
    # the test here too, rather than pass with replacement characters.
    return path.read_bytes().decode().replace("\r\n", "\n").replace("\r", "\n")


if __name__ == "__main__":
    serve(sys.argv[1])
