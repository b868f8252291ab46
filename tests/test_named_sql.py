"""Named SQL files: every one in the package parses, names each statement once, documents it."""

from __future__ import annotations

import ast
import re
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


# A string that reads as a SQL statement: a statement's first word, then one of the words that
# follow it in a statement (case-insensitive, as psycopg would send either).
STATEMENT = re.compile(
    r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP|LOCK|LISTEN|NOTIFY|TRUNCATE|COPY)\b"
    r".*?\b(FROM|INTO|SET|TABLE|WHERE|VALUES|RETURNING)\b",
    re.IGNORECASE | re.DOTALL,
)
# And any string literal handed straight to the driver, however short ("TRUNCATE t", f"LISTEN
# {x}"): what the pattern above would miss.
EXECUTES = {"execute", "executemany", "copy", "stream"}

# Modules allowed inline SQL, by path in the package -> why. Empty: the statements that are
# composed in Python are composed from named parts and match neither check above:
# - queue/jobs.py ENQUEUE_SKIPPING is jobs.sql's `enqueue` plus an ON CONFLICT clause (the same
#   statement, so the two cannot drift; a clause, not a statement);
# - queue/jobs.py claim_sql writes the claim's literal LIMITs into jobs.sql's `claim` with
#   psycopg.sql.Literal (a measured plan needs literals);
# - delivery/worker.py LISTEN writes NOTIFY_CHANNEL into worker.sql's `listen` with
#   psycopg.sql.Identifier (LISTEN takes a name, not a parameter).
ALLOWED: dict[str, str] = {}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def inline_sql(root: Path) -> list[str]:
    """Where a .py file under `root` writes SQL in a string constant: "path:line: text"."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        where = str(path.relative_to(root))
        for node in ast.walk(tree):
            text = None
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) not in docs and STATEMENT.match(node.value):
                    text = node.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in EXECUTES
                and node.args
                and isinstance(node.args[0], ast.Constant | ast.JoinedStr)
            ):
                literal = node.args[0]
                if not (isinstance(literal, ast.Constant) and STATEMENT.match(str(literal.value))):
                    text = ast.unparse(literal)  # one that reads as a statement is found above
            if text is not None and where not in ALLOWED:
                line = getattr(node, "lineno", 0)
                found.append(f"{where}:{line}: {' '.join(text.split())[:70]}")
    return found


def test_no_sql_is_written_inline_in_the_package() -> None:
    """Every statement is a named block of a .sql file, asked for by name (issue 20). Failed on
    main before the move: 61 findings in 19 modules."""
    assert inline_sql(PACKAGE) == []


def test_the_scan_sees_inline_sql(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        '"""Select the rows from the table (a docstring: not SQL)."""\n'
        'Q = """\nselect id from t where x = 1"""\n'
        'conn.execute("TRUNCATE t")\n'
        'conn.execute(f"LISTEN {CHANNEL}")\n'
        'M = "update failed: no row"\n'
    )
    assert [line.split(": ")[0] for line in inline_sql(tmp_path)] == ["m.py:2", "m.py:4", "m.py:5"]


def test_the_recipient_statements_differ_only_in_their_page_and_count() -> None:
    """recipients.sql writes its three statements in full: they must stay the same rows."""
    queries = sql.load("senddock.campaigns", "recipients.sql")
    page = queries["recipients"] + "\nLIMIT %(limit)s OFFSET %(offset)s"
    assert queries["recipients_page"] == page
    counted = page.replace("j.last_stage", "j.last_stage, count(*) OVER () AS full_count", 1)
    assert queries["recipients_page_counted"] == counted
