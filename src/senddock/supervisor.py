"""The supervisor of `senddock worker` with more than one process: a program of its own.

    python -m senddock.supervisor --processes N --concurrency C [--verbose]

`senddock worker` execs this once click has read its options (cli/run.py, `command()`), in the
same process: a signal, a kill or a process manager reaches it as before. It imports the
standard library alone (this module, delivery/processes.py and startup.py, whose functions
import what they use when called), and every worker is forked from it: none of them carries
click or the command line (bench/worker_memory.py, docs/measurements.md). It runs
delivery.processes.run_processes with the four functions below, and says a failure as the
command line does: one line on stderr, exit 1.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import sys

from senddock import startup
from senddock.delivery import processes

MODULE = "senddock.supervisor"  # what `python -m` runs (here __name__ is "__main__")


def command(processes: int, concurrency: int, *, verbose: bool) -> list[str]:
    """The command line that runs this supervisor, with this interpreter and its options."""
    import subprocess

    # The interpreter's own options (-X dev, -W error, -I, ...), as multiprocessing's spawn
    # passes them on to its children.
    options: list[str] = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]
    argv = [sys.executable, *options, "-m", MODULE]
    argv += ["--processes", str(processes), "--concurrency", str(concurrency)]
    return argv + ["--verbose"] * verbose


def supervise(count: int, concurrency: int) -> int:
    """Run `count` worker processes until SIGTERM or SIGINT; their worst exit code."""
    prepare = functools.partial(_prepare, concurrency, count)
    work = functools.partial(_work, concurrency)
    code = processes.run_processes(count, work, prepare=prepare, note=_note_exit)
    with contextlib.suppress(SystemExit):  # it said why; the workers' code is the answer
        processes.in_child(_release_embedded, at_exit=True)
    return code


def _prepare(concurrency: int, count: int) -> None:
    """In the launcher: the checks, and what every worker imports, loaded once for all."""
    startup.check_worker(concurrency, count)
    import senddock.runtime  # noqa: F401

    with contextlib.suppress(ImportError):
        import uvloop  # noqa: F401


def _work(concurrency: int) -> int:
    """One worker process: its exit code."""
    from senddock.db import database_url
    from senddock.runtime import run_worker

    s = startup.settings()
    return run_worker(s, database_url(s), concurrency)


def _release_embedded() -> None:
    """Join the embedded Postgres, if that is the database, so that this process's exit stops
    it when no other process uses it (as a single worker's exit does)."""
    from senddock.db import database_url

    s = startup.settings()
    if not s.database_url:
        database_url(s)


def _note_exit(pid: int, started: str, reason: str) -> None:
    """Write down how a worker process ended, for its death record (delivery/rescuer.py)."""
    import socket

    import psycopg

    from senddock.db import database_url
    from senddock.delivery.rescuer import Identity, note_exit

    ident = Identity(socket.gethostname(), "", pid, started)
    url = database_url(startup.settings())
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        note_exit(conn, ident, reason)


def _options(args: list[str]) -> tuple[int, int, bool]:
    """(processes, concurrency, verbose) from the command line `command()` writes. By hand, not
    with argparse, which loads shutil and the compression libraries with it: 1 MB of the
    supervisor's RSS."""
    match args:
        case ["--processes", count, "--concurrency", concurrency, *rest] if (
            count.isdigit() and concurrency.isdigit() and rest in ([], ["--verbose"])
        ):
            return int(count), int(concurrency), bool(rest)
    raise SystemExit(f"usage: python -m {MODULE} --processes N --concurrency C [--verbose]")


def main(args: list[str] | None = None) -> None:
    count, concurrency, verbose = _options(sys.argv[1:] if args is None else args)
    startup.setup_logging(verbose)
    signal.signal(signal.SIGTERM, startup.exit_on_sigterm)
    try:
        code = supervise(count, concurrency)
    except KeyboardInterrupt:
        print(startup.ABORTED, file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # in the launcher too: a check that failed, said in one line
        print(startup.error_line(exc), file=sys.stderr)
        sys.exit(1)
    sys.exit(code)


if __name__ == "__main__":
    main()
