"""Named SQL: a module's statements live in a `.sql` file beside it and are asked for by name.

A file is a list of blocks, each opened by a `-- name: NAME` line. The comment lines that
follow say what the statement does and which invariant of docs/design.md it keeps; then
comes the statement. Comment lines are documentation, not sent to the server (a `%` in one
would otherwise be read as a placeholder by psycopg). Placeholders are psycopg's
(`%(name)s`); a `{name}` field is a literal the module writes in with `str.format` (the claim's
LIMIT, see senddock/queue/jobs.sql).

    QUERIES = sql.load(__package__, "jobs.sql")
    conn.execute(QUERIES["rescue"], {...})

A file that names a statement twice, or gives one no comment or no text, fails at import.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources

NAME = "-- name:"


@dataclass(frozen=True)
class Statement:
    """One named statement: its text as sent, and the comment that documents it."""

    name: str
    text: str
    doc: str


class Queries(Mapping[str, str]):
    """The statements of one file, by name: `queries["claim"]` is the text to execute."""

    def __init__(self, source: str, statements: dict[str, Statement]) -> None:
        self.source = source
        self.statements = statements

    def __getitem__(self, name: str) -> str:
        try:
            return self.statements[name].text
        except KeyError:
            raise KeyError(f"{self.source} has no statement named {name!r}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.statements)

    def __len__(self) -> int:
        return len(self.statements)


def parse(source: str, text: str) -> Queries:
    """The statements of a file's text (ValueError naming the file and line if malformed)."""
    statements: dict[str, Statement] = {}
    name: str | None = None
    start = 0
    doc: list[str] = []
    body: list[str] = []

    def close() -> None:
        if name is None:
            return
        where = f"{source}:{start}"
        if name in statements:
            raise ValueError(f"{where}: the statement {name!r} is named twice")
        if not doc:
            raise ValueError(f"{where}: the statement {name!r} has no comment saying what it keeps")
        statement = "\n".join(body).strip().rstrip(";").strip()
        if not statement:
            raise ValueError(f"{where}: the statement {name!r} is empty")
        statements[name] = Statement(name, statement, "\n".join(doc))

    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith(NAME):
            close()
            name, start, doc, body = stripped[len(NAME) :].strip(), number, [], []
            if not name.isidentifier():
                raise ValueError(f"{source}:{number}: {name!r} is not a statement name")
        elif stripped.startswith("--"):
            if name is None:
                continue  # the file's own heading
            if not body:
                doc.append(stripped[2:].strip())
        elif name is None:
            if stripped:
                raise ValueError(f"{source}:{number}: text before the first '{NAME}' line")
        else:
            body.append(line)
    close()
    return Queries(source, statements)


@functools.cache
def load(package: str | None, filename: str) -> Queries:
    """The named statements of `filename` in `package` (a module passes its `__package__`)."""
    if not package:
        raise ValueError("sql.load needs the package the .sql file is in")
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    return parse(f"{package.replace('.', '/')}/{filename}", text)
