"""Connections, migrations and the embedded Postgres."""

from senddock.db.connect import connect, database_url
from senddock.db.migrate import MigrationError, check_current, migrate

__all__ = ["MigrationError", "check_current", "connect", "database_url", "migrate"]
