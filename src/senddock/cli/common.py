"""What every command shares: its settings, its database, its one-line error, its --help
epilog. Loaded by the root, so it imports nothing but click (and senddock/startup.py, the
checks without click, which it wraps) at import time: `senddock` must not load the service
layer for a command that does not use it. settings() and db() import what they use when
called."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from senddock import startup
from senddock.startup import first_line

if TYPE_CHECKING:
    import psycopg

    from senddock.config import Settings


class Fail(click.ClickException):
    """A one-line error about the command line itself (what the services below refuse is a
    SendDockError, raised where it happens: main() prints both the same way)."""

    def format_message(self) -> str:
        return " ".join(self.message.split())


@contextmanager
def failing() -> Iterator[None]:
    """Turn the checks' BadSetup (senddock/startup.py) into a Fail, its cause kept."""
    try:
        yield
    except startup.BadSetup as exc:
        raise Fail(str(exc)) from exc.__cause__


def settings() -> Settings:
    """The settings of this command, read from the environment once and checked; every part
    of the command is handed this one object."""
    with failing():
        return startup.settings()


@contextmanager
def db(require_schema: bool = True) -> Iterator[psycopg.Connection[dict[str, Any]]]:
    """A connection to the configured database, with errors turned into one line."""
    import psycopg

    from senddock.db import check_current, connect, database_url

    s = settings()
    try:
        url = database_url(s)
        conn = connect(url)
    except psycopg.OperationalError as exc:
        raise Fail(f"cannot reach the database: {first_line(exc)}") from exc
    except psycopg.ProgrammingError as exc:  # connect() took its password out
        raise Fail(f"bad SENDDOCK_DATABASE_URL: {first_line(exc)}") from exc
    except Exception as exc:  # the embedded server failed to start
        raise Fail(f"cannot start the embedded database: {first_line(exc)}") from exc
    try:
        if require_schema:
            check_current(conn)
        yield conn
    except psycopg.OperationalError as exc:
        raise Fail(f"database error: {first_line(exc)}") from exc
    finally:
        conn.close()


def current_database(s: Settings) -> str:
    """The database URL, once the database is reachable and its schema current; else Fail."""
    with failing():
        return startup.current_database(s)


def read_file(path: str | None, what: str) -> str | None:
    if path is None:
        return None
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise Fail(f"cannot read {what} {path}: {exc}") from exc


def iso(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def epilog(*names: str) -> str:
    """The --help epilog naming the settings a command reads."""
    return "Settings (environment): " + ", ".join(f"SENDDOCK_{n}" for n in names) + "."


# The settings each command reads (its --help lists them). See config.py.
DB = ("DATABASE_URL", "DATA_DIR")
SENDING = ("SMTP_URL", "SMTP_TIMEOUT", "RETRY_SCHEDULE")
LINKS = ("PUBLIC_URL", "SECRET_KEY", "UNSUBSCRIBE_MAILTO")
WORKER = (
    *DB,
    *SENDING,
    *LINKS,
    "HEARTBEAT_INTERVAL",
    "LEASE_SECONDS",
    "SENDER_FAULT_LIMIT",
    "JOB_SENDER_FAULT_LIMIT",
    "CLAIM_BATCH",
    "RETENTION_DAYS",
    "ENQUEUE_CHUNK",
)
WEB = (
    "SESSION_SECRET",
    "COOKIE_SECURE",
    "SESSION_IDLE_TIMEOUT",
    "SESSION_LIFETIME",
    "TRUSTED_PROXIES",
    "ONE_CLICK",
)
