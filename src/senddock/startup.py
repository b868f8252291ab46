"""What a command does before it runs and when it fails, without click: its logging, its
settings and database checked, its startup block, its one-line error.

The command line (cli/common.py, cli/run.py, cli/root.py) wraps these; a process that must not
load click, `senddock worker`'s supervisor, calls them as they are. At import time this module
loads the standard library alone; each function imports what it uses (pydantic, psycopg) when
called.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from types import FrameType
from typing import TYPE_CHECKING

from senddock.errors import SendDockError, Unavailable
from senddock.redaction import redact
from senddock.words import plural

if TYPE_CHECKING:
    from senddock.config import Settings

log = logging.getLogger("senddock")

SECRET_URLS = ("SENDDOCK_DATABASE_URL", "SENDDOCK_SMTP_URL")
ABORTED = "senddock: aborted"  # what an interrupted command says, exiting 130


class BadSetup(Unavailable):
    """The configuration, or the database it names, is not fit to start on: one line."""


@functools.cache
def settings() -> Settings:
    """The settings of this process, read from the environment once and checked; every part
    of the command is handed this one object."""
    from pydantic import ValidationError

    from senddock.audience import addresses
    from senddock.bounces.verp import ReturnPath
    from senddock.config import SmtpTarget, load

    try:
        s = load()
        SmtpTarget.parse(s.smtp_url)
        s.backoff  # noqa: B018  (parse the schedule now, not mid-broadcast)
        s.proxies  # noqa: B018
        if s.bounce_domain:
            ReturnPath.parse(s.bounce_domain)
    except (ValidationError, ValueError) as exc:
        raise BadSetup(f"bad configuration: {exc}") from exc
    addresses.configure(s.allow_reserved_domains)
    return s


def current_database(s: Settings) -> str:
    """The database URL, once the database is reachable and its schema current; else BadSetup
    (its cause the driver's error), or the MigrationError that says to migrate."""
    import psycopg

    from senddock.db import check_current, connect, database_url

    try:
        url = database_url(s)
        with connect(url) as conn:
            check_current(conn)
    except psycopg.OperationalError as exc:
        raise BadSetup(f"cannot reach the database: {first_line(exc)}") from exc
    except psycopg.ProgrammingError as exc:  # connect() took its password out
        raise BadSetup(f"bad SENDDOCK_DATABASE_URL: {first_line(exc)}") from exc
    except SendDockError:  # the schema is not current: said as it is
        raise
    except Exception as exc:  # the embedded server failed to start
        raise BadSetup(f"cannot start the embedded database: {first_line(exc)}") from exc
    return url


def startup_block(command: str, s: Settings, senders: str) -> str:
    """What a long-running command is about to use, for stderr: relays, limits, senders,
    database and public URL, with a warning for each setting left at a default that only
    suits a test machine. Passwords are never shown."""
    from senddock import config
    from senddock.db.connect import default_data_dir

    rows = config.describe(s)
    if not s.database_url:
        rows[-1] = ("database", f"embedded Postgres in {default_data_dir(s) / 'pgdata'}")
    rows += [("senders", senders), ("public URL", s.public_url)]
    lines = [f"senddock {command}: starting"]
    lines += [f"  {label:<12}{text}" for label, text in rows]
    if config.defaulted(s, "smtp_url"):
        lines.append(
            f"  warning: SENDDOCK_SMTP_URL is not set; sending to the default {s.smtp_url}"
        )
    if config.defaulted(s, "public_url"):
        lines.append(
            "  warning: SENDDOCK_PUBLIC_URL is not set; unsubscribe links in messages point to"
            f" {s.public_url}, which subscribers cannot reach"
        )
    return "\n".join(lines)


def check_worker(concurrency: int, processes: int) -> Settings:
    """`senddock worker`'s settings, once they and the database are checked; what the worker
    will use, told on stderr."""
    s = settings()
    current_database(s)
    each = plural(concurrency, "SMTP session")
    senders = f"{each} in each of {plural(processes, 'process', 'processes')}"
    print(startup_block("worker", s, senders), file=sys.stderr, flush=True)
    return s


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def secret(text: str) -> str:
    """`text` with the passwords of the configured URLs (and of any URL in it) hidden."""
    return redact(text, *(os.environ.get(name, "") for name in SECRET_URLS))


def error_line(exc: Exception) -> str:
    """The one line a command that failed with `exc` ends with (it exits 1): what a service
    refused, with its reason, or an internal error. With -v, the traceback is logged first."""
    if isinstance(exc, SendDockError):
        log.debug("the error below", exc_info=exc)
        return f"senddock: error: {secret(exc.message)}"
    log.debug("unexpected error", exc_info=exc)
    return f"senddock: internal error: {secret(first_line(exc))} (run with -v for details)"


class _Redacting(logging.Formatter):
    """Log lines, tracebacks included, with every password replaced by ***."""

    def format(self, record: logging.LogRecord) -> str:
        return secret(super().format(record))


def setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Redacting("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])
    if verbose:  # our own details, tracebacks included (they are logged at DEBUG)
        logging.getLogger("senddock").setLevel(logging.DEBUG)


def exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM during a command: exit as a signal would, but through Python's exit, so the
    embedded Postgres's cleanup (atexit) still stops it and forgets this process."""
    raise SystemExit(128 + signum)
