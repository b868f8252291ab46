"""db/schema.sql is the schema a fresh database holds after every migration (issue 36, item 4).

A migration added or changed without `python3 dev.py schema` fails here, with the diff. The queue
statements name, in their files' headings, the triggers and functions they rely on: each must
be in db/schema.sql, so a migration that drops or renames one fails here too.
"""

from __future__ import annotations

import difflib
import re
from importlib import resources
from pathlib import Path

import pytest

from senddock.db import connect
from senddock.db.catalog import fresh_database, schema_text

SCHEMA = Path(__file__).resolve().parent.parent / "db" / "schema.sql"
# A heading line naming one object: "--   trigger campaign_follows_broadcast (0013): why".
RELIES_ON = re.compile(r"^--\s+(trigger|function) (\w+)")


def test_schema_file_matches_a_freshly_migrated_database(pg_server: str) -> None:
    with fresh_database(pg_server) as url, connect(url) as conn:
        fresh = schema_text(conn)
    kept = SCHEMA.read_text(encoding="utf-8")
    made_by, here = (written_by(text) for text in (kept, fresh))
    if made_by != here:
        pytest.skip(f"db/schema.sql is written by Postgres {made_by}; this server is {here}")
    if fresh != kept:
        diff = difflib.unified_diff(
            kept.splitlines(), fresh.splitlines(), "db/schema.sql", "migrated", lineterm="", n=1
        )
        shown = "\n".join(list(diff)[:60])
        raise AssertionError(
            f"db/schema.sql differs from a freshly migrated database; run"
            f" `python3 dev.py schema` and commit it:\n{shown}"
        )


def written_by(schema: str) -> str:
    """The major version of the Postgres that wrote a schema file (its header says)."""
    found = re.search(r"^-- Written by Postgres (\S+) ", schema, re.M)
    return found[1] if found else "?"


def relied_on(text: str) -> list[tuple[str, str]]:
    """The (kind, name) pairs a .sql file's heading (the lines before its first statement) names."""
    heading = text.split("-- name:", 1)[0]
    return [(m[1], m[2]) for line in heading.splitlines() if (m := RELIES_ON.match(line))]


def defined(kind: str, name: str, schema: str) -> bool:
    if kind == "trigger":
        return re.search(rf"^CREATE TRIGGER {name} ", schema, re.M) is not None
    return re.search(rf"^CREATE OR REPLACE FUNCTION public\.{name}\(", schema, re.M) is not None


def test_every_trigger_and_function_the_queue_relies_on_is_in_the_schema() -> None:
    schema = SCHEMA.read_text(encoding="utf-8")
    queue = resources.files("senddock.queue").iterdir()
    files = sorted((f for f in queue if f.name.endswith(".sql")), key=lambda f: f.name)
    assert files, "no queue statements found"
    missing = []
    for f in files:
        named = relied_on(f.read_text(encoding="utf-8"))
        assert named, f"queue/{f.name} names no trigger or function it relies on in its heading"
        missing += [f"queue/{f.name}: {k} {n}" for k, n in named if not defined(k, n, schema)]
    assert not missing, "named in a heading but not in db/schema.sql: " + "; ".join(missing)


def test_relied_on_reads_only_the_heading() -> None:
    text = "-- heading\n--   trigger a_b (0010): why\n--   function c (1): x\n"
    text += "-- name: s\n--   trigger z (a statement's comment, not the heading)\nSELECT 1\n"
    assert relied_on(text) == [("trigger", "a_b"), ("function", "c")]
