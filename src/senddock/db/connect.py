"""Where the database is: SENDDOCK_DATABASE_URL, or an embedded Postgres of our own."""

from __future__ import annotations

from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from senddock.config import Settings
from senddock.db.embedded import EmbeddedPostgres
from senddock.redaction import redact

_embedded: EmbeddedPostgres | None = None


def default_data_dir(settings: Settings) -> Path:
    """Where the embedded Postgres keeps its data when no URL is given."""
    if settings.data_dir:
        return Path(settings.data_dir)
    base = settings.xdg_data_home or str(Path.home() / ".local" / "share")
    return Path(base) / "senddock"


def database_url(settings: Settings) -> str:
    """The configured URL, or start (or join) the embedded server and return its URL."""
    global _embedded
    if settings.database_url:
        return settings.database_url
    if _embedded is None:
        _embedded = EmbeddedPostgres(default_data_dir(settings) / "pgdata")
        _embedded.start()
    return _embedded.url


def connect(url: str, *, autocommit: bool = True) -> psycopg.Connection[dict[str, object]]:
    """A synchronous connection whose rows are dicts. An error that quotes the URL (libpq
    does, for one it cannot parse) is raised again with the password hidden."""
    try:
        return psycopg.connect(url, autocommit=autocommit, row_factory=dict_row, connect_timeout=10)
    except psycopg.Error as exc:
        clean = redact(str(exc), url)
        if clean == str(exc):
            raise
        hidden = type(exc)(clean)
    raise hidden  # outside the except: the original, password and all, is not its context
