"""Named SQL files: every one in the package parses, names each statement once, documents it."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from senddock.db import sql

PACKAGE = Path(str(resources.files("senddock")))


def named_files() -> list[Path]:
    """Every named-query file shipped in the package (migrations are plain scripts)."""
    return sorted(p for p in PACKAGE.rglob("*.sql") if "migrations" not in p.parts)


def test_every_named_file_loads_with_a_comment_on_each_statement() -> None:
    found = named_files()
    # The queue layer's statements are among them (the loop below is not over nothing).
    assert PACKAGE / "queue" / "jobs.sql" in found, found
    for path in found:
        package = ".".join(("senddock", *path.parent.relative_to(PACKAGE).parts))
        queries = sql.load(package, path.name)
        assert len(queries) > 0, path
        for statement in queries.statements.values():
            assert statement.doc, (path, statement.name)


def test_a_statement_is_asked_for_by_name_and_comments_are_not_sent() -> None:
    queries = sql.parse(
        "x.sql",
        "-- heading of the file\n"
        "-- name: one\n-- Invariant 2: one 100 % claim.\nSELECT 1;\n\n"
        "-- name: two\n-- what it keeps\nSELECT 2\n  -- inside\nFROM t\n",
    )
    assert list(queries) == ["one", "two"]
    assert queries["one"] == "SELECT 1"
    assert queries.statements["one"].doc == "Invariant 2: one 100 % claim."
    assert queries["two"] == "SELECT 2\nFROM t"
    with pytest.raises(KeyError, match=r"x\.sql has no statement named 'three'"):
        queries["three"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("-- name: a\n-- doc\nSELECT 1\n-- name: a\n-- doc\nSELECT 2\n", "named twice"),
        ("-- name: a\nSELECT 1\n", "no comment"),
        ("-- name: a\n-- doc\n", "is empty"),
        ("SELECT 1\n-- name: a\n-- doc\nSELECT 1\n", "before the first"),
        ("-- name: not a name\n-- doc\nSELECT 1\n", "not a statement name"),
    ],
)
def test_a_malformed_file_fails_naming_the_file_and_line(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as caught:
        sql.parse("bad.sql", text)
    assert "bad.sql:" in str(caught.value)
