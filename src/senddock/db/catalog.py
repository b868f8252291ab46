"""The schema on one page: db/schema.sql is what a fresh database holds after every migration.

`schema_text(conn)` writes it from the catalog, table by table (columns, constraints, indexes,
triggers beside each other), then views and functions, every list in name order: the same
migrations give the same bytes on any machine. It reads the server's own deparsers
(pg_get_*def) rather than running pg_dump: no client binary to find or match to the server's
version, no per-run token to strip, and a layout made for reading, not for restoring. The file
is at the repo root, not in the package: a page for people, not shipped, and every .sql under
src/senddock stays a migration or a file of named statements.

    python3 dev.py schema          # regenerate db/schema.sql from a freshly migrated database
    tests/test_schema_file.py      # fails when a migration changed the schema and the file didn't
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql as pgsql

from senddock.db import sql
from senddock.db.connect import connect
from senddock.db.migrate import migrate

QUERIES = sql.load(__package__, "catalog.sql")
HEADER = """\
-- The schema after every migration, generated: do not edit by hand. To change the schema, add a
-- migration under src/senddock/db/migrations/, then regenerate this file with
--   python3 dev.py schema
-- tests/test_schema_file.py fails while it differs from a freshly migrated database.
-- Written by Postgres {major} (the embedded server of the tests; its deparsers' output can
-- change from one major version to the next).
"""

Conn = psycopg.Connection[dict[str, object]]


def schema_text(conn: Conn) -> str:
    """The schema of `conn`'s database (its current schema), as db/schema.sql holds it."""
    major = conn.execute(QUERIES["major_version"]).fetchone()
    parts = [HEADER.format(major=major["major"] if major else "?")]
    for row in conn.execute(QUERIES["extensions"]):
        parts.append(f"CREATE EXTENSION {row['name']};\n")
    for row in conn.execute(QUERIES["types"]):
        if row["kind"] == "e":
            parts.append(f"CREATE TYPE {row['name']} AS ENUM ({row['definition']});\n")
        else:
            parts.append(f"CREATE DOMAIN {row['name']} AS {row['definition']};\n")
    for row in conn.execute(QUERIES["sequences"]):
        parts.append(f"CREATE SEQUENCE {row['name']} AS {row['type']};\n")
    for table in conn.execute(QUERIES["tables"]).fetchall():
        parts.append(_table(conn, table))
    for row in conn.execute(QUERIES["views"]):
        kind = "MATERIALIZED VIEW" if row["materialized"] else "VIEW"
        parts.append(f"CREATE {kind} {row['name']} AS\n{str(row['definition']).rstrip()}\n")
    for row in conn.execute(QUERIES["functions"]):
        parts.append(f"{str(row['definition']).rstrip()};\n")
    return "\n".join(parts)


def _table(conn: Conn, table: dict[str, object]) -> str:
    lines = [_column(c) for c in conn.execute(QUERIES["columns"], {"table": table["oid"]})]
    for c in conn.execute(QUERIES["constraints"], {"table": table["oid"]}):
        lines.append(f"CONSTRAINT {c['name']} {c['definition']}")
    unlogged = "UNLOGGED " if table["unlogged"] else ""
    text = f"-- ===== {table['name']} =====\nCREATE {unlogged}TABLE {table['name']} (\n"
    text += ",\n".join("    " + line for line in lines) + "\n)"
    text += f" WITH ({table['options']});\n" if table["options"] else ";\n"
    for i in conn.execute(QUERIES["indexes"], {"table": table["oid"]}):
        text += f"{i['definition']};\n"
    for t in conn.execute(QUERIES["triggers"], {"table": table["oid"]}):
        text += f"{t['definition']};\n"
    return text


def _column(c: dict[str, object]) -> str:
    text = f"{c['name']} {c['type']}"
    if c["collation"]:
        text += f' COLLATE "{c["collation"]}"'
    if c["identity"] in ("a", "d"):
        always = "ALWAYS" if c["identity"] == "a" else "BY DEFAULT"
        text += f" GENERATED {always} AS IDENTITY"
    elif c["generated"] in ("s", "v"):
        stored = "STORED" if c["generated"] == "s" else "VIRTUAL"
        text += f" GENERATED ALWAYS AS ({c['expression']}) {stored}"
    elif c["expression"] is not None:
        text += f" DEFAULT {c['expression']}"
    if c["not_null"]:
        text += " NOT NULL"
    return text


@contextlib.contextmanager
def fresh_database(server_url: str) -> Iterator[str]:
    """A new database on `server_url`'s server, every migration applied; dropped on the way out."""
    plain = f"senddock_schema_{secrets.token_hex(4)}"
    name = pgsql.Identifier(plain)
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(pgsql.SQL(QUERIES["create_database"]).format(name=name))
    url = urlunsplit(urlsplit(server_url)._replace(path="/" + plain))
    try:
        with connect(url) as conn:
            migrate(conn)
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(pgsql.SQL(QUERIES["drop_database"]).format(name=name))


@contextlib.contextmanager
def scratch_server() -> Iterator[str]:
    """The server the tests use: SENDDOCK_TEST_DATABASE_URL's, else an embedded one for now."""
    given = os.environ.get("SENDDOCK_TEST_DATABASE_URL")
    if given:
        yield given
        return
    from senddock.db.embedded import EmbeddedPostgres

    base = Path(tempfile.mkdtemp(prefix="sdschema"))  # short path: unix socket names are limited
    server = EmbeddedPostgres(base / "pg", delete=True)
    try:
        yield server.start()
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def main(argv: Sequence[str]) -> int:
    """`python -m senddock.db.catalog OUT`: write the schema of a freshly migrated database."""
    if len(argv) != 1:
        print("usage: python -m senddock.db.catalog OUT.sql", file=sys.stderr)
        return 2
    with scratch_server() as server, fresh_database(server) as url, connect(url) as conn:
        text = schema_text(conn)
    Path(argv[0]).write_text(text, encoding="utf-8")
    print(f"wrote {argv[0]} ({text.count(chr(10))} lines)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
