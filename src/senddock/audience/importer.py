"""CSV import: stream rows, report bad ones by line, upsert the rest in batches.

Memory stays flat whatever the file's size: rows are read one at a time and sent in batches
of BATCH with COPY into a temporary table, then merged with two set-based statements.
Re-importing updates rather than duplicates (one subscriber per address, case-insensitive):
a non-empty name replaces the old one, attributes are merged. Importing never lifts a
suppression nor undoes a membership someone left: a suppressed or unsubscribed address stays so.

Columns: `email` (required), `name`, `attributes` (a JSON object); any other column becomes
a string attribute of that name, except `status` and `suppressed` (what an export writes).

listmonk's subscriber export (`uuid,email,name,attributes,status,created_at,updated_at`) is
told by its header: a `blocklisted` row is imported and suppressed (reason `manual`, detail
LISTMONK_BLOCKLISTED: listmonk does not say whether a person, a bounce or an unsubscribe
blocklisted it), `enabled` and `disabled` rows are imported as sendable (listmonk sends
campaigns to both), `created_at` becomes a new subscriber's, and `uuid` the attribute
`listmonk_uuid`.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from senddock.audience import cells
from senddock.audience.addresses import InvalidAddress, normalize
from senddock.audience.lists import ensure_list
from senddock.db import sql
from senddock.errors import Invalid

BATCH = 10_000
# Columns `subscribers export` writes that describe state, not the person: never attributes.
EXPORT_ONLY = {"status", "suppressed"}
# The header of listmonk's subscriber export (Subscribers → Export), in its order.
LISTMONK_HEADER = ("uuid", "email", "name", "attributes", "status", "created_at", "updated_at")
LISTMONK_STATUSES = ("enabled", "disabled", "blocklisted")
LISTMONK_BLOCKLISTED = "listmonk: blocklisted"
# Rejections kept on the report when no callback takes them (the rest are only counted).
KEEP_REJECTED = 10_000

QUERIES = sql.load(__package__, "importer.sql")


class UnreadableFile(Invalid, OSError):
    """The CSV cannot be imported whole (missing, not text, no header, no email column, a
    runaway quote): nothing of it is imported; 422, about the uploaded `file`."""


@dataclass
class Lines:
    """What a read of the file has met so far, by physical line."""

    read: int = 0  # lines, the header's included
    blank: int = 0  # empty lines (not rows)
    inside: int = 0  # lines inside a quoted field, past the first line of its row


@dataclass
class ImportReport:
    imported: int = 0  # rows imported
    rejected: list[tuple[int, str]] = field(default_factory=list)
    rejected_count: int = 0
    addresses: int = 0  # distinct addresses among them (case-insensitive): subscribers
    created: int = 0  # of those, subscribers that did not exist before
    blocklisted: int = 0  # listmonk rows marked blocklisted: imported and suppressed
    lines: Lines = field(default_factory=Lines)  # every line of the file, accounted for

    @property
    def merged(self) -> int:
        """Imported rows that repeated an address of an earlier row (merged into it)."""
        return self.imported - self.addresses


Reject = Callable[[int, str], None]


# One bad row is reported by its line and the rest imported (issue 19.8): a field longer
# than MAX_FIELD, bytes that are not UTF-8, attributes nested deeper than MAX_DEPTH. The
# csv module's own limit (128 KiB) raised mid-file, and after it the parser resumes inside
# the field (the next row is lost too): ours is checked per row, the module's is lifted
# (a field is at most the file, whose upload is capped: web/guard.py).
MAX_FIELD = 64 * 1024
MAX_DEPTH = 32  # psycopg and json cannot load a JSON value nested ~1,000 levels deep
csv.field_size_limit(2**31 - 1)
LINE_BREAK = re.compile(r"\s*[\r\n]+\s*")
NOT_UTF8 = re.compile("[\udc80-\udcff]")  # what errors="surrogateescape" makes of bad bytes

Row = list[str] | str  # the fields, or why the row cannot be read

# The header names an email column takes (case ignored): ours, Mailchimp's `Email Address`,
# and what spreadsheets and other tools write. Likewise a first and a last name (Mailchimp,
# Google Contacts) make the name when there is no `name` column.
EMAIL_NAMES = frozenset(
    {"email", "e-mail", "email address", "e-mail address", "mail", "email_address"}
)
FIRST_NAMES = frozenset({"first name", "firstname", "first_name", "given name"})
LAST_NAMES = frozenset({"last name", "lastname", "last_name", "family name", "surname"})
# Delimiters a header is tried with, in order: Excel writes ';' in many locales.
DELIMITERS = (",", ";", "\t")

# A quoted field may hold a line break (a two-line name, an address); a quote left open
# instead swallows the rows after it as one field (issue 35: 1,900 rows of a 2,000-row file
# vanished into one "name"). A field that spans lines is a runaway, and the file is refused
# whole, when a line inside it looks like a row of its own (an address cell next to a
# delimiter), when it spans more than MAX_SPAN lines or MAX_FIELD characters, when the row
# it makes has another number of fields than the header, or when the file ends inside it.
MAX_SPAN = 20
_CELL = r'[^\s@",;<>]+@[^\s@",;<>]+\.[^\s@",;<>]+'
ROW_SHAPED = re.compile(rf'(?:^|[,;\t])\s*"?{_CELL}"?\s*(?:[,;\t]|$)')


class RunawayQuote(UnreadableFile):
    """A quote opened in one row is never closed where it should be: the file is refused
    whole, naming the row's line and the lines the open quote runs over."""


class _Physical:
    """The file's lines for the csv reader, each also kept on `seen` until the row that
    takes it is read; `ended` once the reader has asked past the last one."""

    def __init__(self, handle: io.TextIOBase) -> None:
        self._lines = iter(handle)
        self.seen: list[str] = []
        self.ended = False

    def __iter__(self) -> _Physical:
        return self

    def __next__(self) -> str:
        try:
            line = next(self._lines)
        except StopIteration:
            self.ended = True
            raise
        self.seen.append(line)
        return line


def _ends_quoted(text: str, delimiter: str) -> bool:
    """Whether `text` (a row's lines) ends inside a quoted field, as the csv module reads it
    (not strict: a character after a closing quote joins the field)."""
    quoted = after = False
    start = True
    for ch in text:
        if quoted:
            if ch == '"':
                quoted, after = False, True
        elif after and ch == '"':
            quoted, after = True, False  # a doubled quote: still inside
        elif ch == delimiter or ch in "\r\n":
            start, after = True, False
        elif start and ch == '"':
            quoted, start = True, False
        else:
            start = after = False
    return quoted


def _runaway(
    where: str, line: int, seen: list[str], delimiter: str, at_end: bool, ragged: bool
) -> str | None:
    """Why the row of `seen` (its physical lines, starting at `line`; `ragged` if an open
    quote made it of the wrong width) is a runaway quote, or None if it is not one."""
    last = line + len(seen) - 1
    span = f"line {line}" if last == line else f"lines {line}-{last}"
    if at_end and _ends_quoted("".join(seen), delimiter):
        why = f"is never closed: {span}, to the end of the file, would be one field"
    elif len(seen) < 2:
        return None
    else:
        size = sum(len(text) for text in seen)
        # Inside the field: the lines after the first, the last one up to its first quote
        # (after the quote that closes the field, a row's next cells follow, its address too).
        inside = [*seen[1:-1], seen[-1].split('"', 1)[0]]
        shaped = next((i for i, text in enumerate(inside, 1) if ROW_SHAPED.search(text)), 0)
        if shaped:
            why = f"runs over {span}, and line {line + shaped} looks like a row of its own"
        elif len(seen) > MAX_SPAN or size > MAX_FIELD:
            why = f"runs over {span} ({size} characters) in one field"
        elif ragged:  # the quote took a delimiter or a line's end for text
            why = f"runs over {span}, and the row it makes has not the header's columns"
        else:
            return None
    return (
        f"{where}:{line}: a quote opened in this row {why}; close the quote (one inside a"
        ' quoted field is written "") and import again; nothing was imported'
    )


def _open(path: Path) -> io.TextIOBase:
    """The file as text, seekable (it is read twice: checked whole, then imported)."""
    try:
        handle = path.open(newline="", encoding="utf-8-sig", errors="surrogateescape")
    except OSError as exc:
        raise UnreadableFile(f"cannot read {path}: {exc.strerror or exc}", field="file") from exc
    if handle.seekable():
        return handle
    with handle:  # a pipe: kept in a temporary file, which the caller closes
        spool = tempfile.TemporaryFile(  # noqa: SIM115
            "w+", newline="", encoding="utf-8", errors="surrogateescape"
        )
        shutil.copyfileobj(handle, spool)
    spool.seek(0)
    return spool


def _rows(
    handle: io.TextIOBase, delimiter: str, lines: Lines, where: str
) -> Iterator[tuple[int, Row]]:
    """(line the row starts on, fields or why not) for every non-blank row; RunawayQuote if
    a quote runs away (see ROW_SHAPED)."""
    physical = _Physical(handle)
    seen = physical.seen
    reader = csv.reader(physical, delimiter=delimiter)
    line = 1
    width = 0  # the header's fields
    while True:
        try:
            row: Row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            row = f"cannot be read as CSV: {exc}"
        lines.read += len(seen)
        at_end = physical.ended  # the row was cut off by the end of the file
        # A row of the wrong width whose multi-line field holds a delimiter: the open quote
        # took delimiters and line ends for text (a short row alone is padded, not this).
        ragged = isinstance(row, str) or (
            len(row) != width and any(delimiter in f and LINE_BREAK.search(f) for f in row)
        )
        suspect = bool(seen) and (len(seen) > 1 or at_end) and width > 0
        why = _runaway(where, line, seen, delimiter, at_end, ragged) if suspect else None
        if why is not None:
            raise RunawayQuote(why, field="file")
        if not width and row and not isinstance(row, str):
            width = len(row)
        lines.inside += max(0, len(seen) - 1)
        if row:
            yield line, row
        else:
            lines.blank += 1
        line += len(seen)
        seen.clear()


def _field_name(text: str) -> str:
    """A header cell as a column name: BOM, spaces and case off; an email alias is `email`."""
    name = text.replace("\ufeff", "").strip().lower()
    return "email" if name in EMAIL_NAMES else name


def _delimiter(handle: io.TextIOBase) -> str:
    """The delimiter under which the header row has an email column (',' if none has)."""
    first = handle.readline()
    handle.seek(0)
    for delimiter in DELIMITERS:
        fields = next(csv.reader([first], delimiter=delimiter), [])
        if "email" in (_field_name(f) for f in fields):
            return delimiter
    return ","


def _header(path: Path, rows: Iterator[tuple[int, Row]]) -> list[str]:
    first = next(rows, None)
    if first is not None and isinstance(first[1], str):
        raise UnreadableFile(f"{path}: the header row {first[1]}", field="file")
    fields = [_field_name(f) for f in first[1]] if first else []
    if "email" not in fields:
        raise UnreadableFile(f"{path}: the header row has no 'email' column", field="file")
    named = [f for f in fields if f]
    twice = next((f for i, f in enumerate(named) if f in named[:i]), None)
    if twice is not None:
        raise UnreadableFile(
            f"{path}: the header row names the column '{twice}' twice", field="file"
        )
    return fields


def _depth(text: str) -> int:
    """How deep the arrays and objects of the JSON `text` nest (strings skipped)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


# Go's time.Time.String(), what listmonk writes: `2024-03-05 10:11:12.123456789 +0000 UTC`.
_GO_TIME = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.(\d{1,9}))? ([+-]\d{4})(?: \S+)?")


def _timestamp(text: str) -> str | None:
    """An ISO 8601 timestamp from listmonk's export (Go's format or ISO 8601); None if not."""
    go = _GO_TIME.fullmatch(text)
    if go is not None:
        seconds, fraction, offset = go.groups()
        text = f"{seconds}.{(fraction or '0')[:6]}{offset[:3]}:{offset[3:]}"
    try:
        return datetime.fromisoformat(text).isoformat()
    except ValueError:
        return None


class _Parser:
    """Turns one CSV row into a staged row, or a reason to reject it."""

    def __init__(self, fields: list[str]) -> None:
        self.width = len(fields)
        self.email = fields.index("email")
        self.name = fields.index("name") if "name" in fields else None
        self.attrs = fields.index("attributes") if "attributes" in fields else None
        skip = {"email", "name", "attributes", ""} | EXPORT_ONLY
        # No name column: a first and a last name column make it (Mailchimp's export).
        self.parts: list[int] = []
        if self.name is None:
            first = next((i for i, f in enumerate(fields) if f in FIRST_NAMES), None)
            last = next((i for i, f in enumerate(fields) if f in LAST_NAMES), None)
            self.parts = [i for i in (first, last) if i is not None]
            skip |= {fields[i] for i in self.parts}
        # listmonk's export, told by its header: status and created_at mean something.
        self.listmonk = set(LISTMONK_HEADER) <= set(fields)
        self.status = fields.index("status") if self.listmonk else None
        self.created = fields.index("created_at") if self.listmonk else None
        if self.listmonk:
            skip |= {"uuid", "created_at", "updated_at"}
        self.uuid = fields.index("uuid") if self.listmonk else None
        self.extra = [(i, f) for i, f in enumerate(fields) if f not in skip]

    def _listmonk(self, row: list[str]) -> tuple[str | None, bool] | str:
        """(created_at, blocklisted) of a listmonk row, or why the row is refused."""
        created: str | None = None
        if self.created is not None and row[self.created].strip():
            created = _timestamp(row[self.created].strip())
            if created is None:
                return f"created_at {row[self.created].strip()[:40]!r} is not a timestamp"
        status = row[self.status].strip().lower() if self.status is not None else ""
        if self.status is not None and status not in LISTMONK_STATUSES:
            return f"status must be one of {', '.join(LISTMONK_STATUSES)}, got {status[:40]!r}"
        return created, status == "blocklisted"

    def parse(self, row: list[str]) -> tuple[str, str, str, str | None, bool] | str:
        if any(len(v) > MAX_FIELD for v in row):
            return f"a field is longer than {MAX_FIELD // 1024} KiB"
        bad = next((NOT_UTF8.search(v) for v in row if NOT_UTF8.search(v)), None)
        if bad is not None:
            byte = ord(bad.group()) - 0xDC00
            return f"not UTF-8 text (byte 0x{byte:02X}): save the file as UTF-8"
        if len(row) > self.width:
            return "more fields than the header"
        if len(row) < self.width:
            row = row + [""] * (self.width - len(row))
        row = [cells.uncell(v) for v in row]  # as an export wrote them (audience/cells.py)
        raw = row[self.email].strip()
        if not raw:
            return "no email address"
        if any("\x00" in v for v in row):
            return "contains a NUL byte"
        name = row[self.name] if self.name is not None else " ".join(row[i] for i in self.parts)
        # A quoted name on two lines (a runaway quote never gets here: _runaway) is joined.
        name = LINE_BREAK.sub(" ", name.strip())
        try:
            address = normalize(raw)
        except InvalidAddress as exc:
            return str(exc)
        attrs: dict[str, Any] = {}
        if self.attrs is not None and row[self.attrs].strip():
            if _depth(row[self.attrs]) > MAX_DEPTH:
                return f"attributes nest deeper than {MAX_DEPTH} levels"
            try:
                attrs = json.loads(row[self.attrs])
            except (ValueError, RecursionError):
                return "attributes is not valid JSON"
            if not isinstance(attrs, dict):
                return "attributes is not a JSON object"
        for i, key in self.extra:
            if row[i] != "":
                attrs[key] = row[i]
        listmonk = self._listmonk(row)
        if isinstance(listmonk, str):
            return listmonk
        if self.uuid is not None and row[self.uuid].strip():
            attrs["listmonk_uuid"] = row[self.uuid].strip()
        text = json.dumps(attrs, ensure_ascii=False) if attrs else "{}"
        return address, name, text, *listmonk


# line, email, name, attributes (JSON text), created_at (ISO text or None), blocklisted
Staged = tuple[int, str, str, str, str | None, bool]


@dataclass
class Chunk:
    """The next rows of a file: those to import, those rejected, and how many rows in all."""

    staged: list[Staged]
    rejected: list[tuple[int, str]]
    rows: int
    ended: bool  # no row is left after these


def checked_rows(
    handle: io.TextIOBase, path: Path, lines: Lines
) -> tuple[list[str], Iterator[tuple[int, Row]]]:
    """The header's column names and the data rows of a seekable CSV, read whole once first:
    UnreadableFile (no email column, a runaway quote) before any row is handed out. Every
    CSV import reads through here (subscribers, suppressions)."""
    delimiter = _delimiter(handle)
    scan = _rows(handle, delimiter, Lines(), str(path))
    fields = _header(path, scan)
    for _ in scan:
        pass
    handle.seek(0)
    rows = _rows(handle, delimiter, lines, str(path))
    next(rows)  # the header, checked above
    return fields, rows


def open_csv(path: Path) -> io.TextIOBase:
    """A CSV file as every import reads it (UTF-8, BOM skipped, seekable): UnreadableFile if
    it cannot be opened."""
    return _open(path)


class RowReader:
    """The data rows of an open CSV, checked, a chunk at a time. The whole file is read once
    first, so a file that cannot be imported whole (UnreadableFile: no email column, a
    runaway quote) is refused before a row reaches the database."""

    def __init__(self, handle: io.TextIOBase, path: Path) -> None:
        self.lines = Lines()  # what the import has read
        fields, self._rows = checked_rows(handle, path, self.lines)
        self._parser = _Parser(fields)

    def skip(self, n: int) -> None:
        """Pass over the next `n` rows unread (a resumed import's rows already done)."""
        for _ in itertools.islice(self._rows, n):
            pass

    def chunk(self, size: int = BATCH) -> Chunk:
        """Rows up to the `size`-th one to import (rejected rows do not count toward it)."""
        chunk = Chunk([], [], 0, False)
        for line, row in self._rows:
            chunk.rows += 1
            parsed = row if isinstance(row, str) else self._parser.parse(row)
            if isinstance(parsed, str):
                chunk.rejected.append((line, parsed))
                continue
            chunk.staged.append((line, *parsed))
            if len(chunk.staged) >= size:
                return chunk
        chunk.ended = True
        return chunk


def open_bytes(content: bytes) -> io.TextIOBase:
    """An uploaded file's bytes, read as `_open` reads a file."""
    return io.TextIOWrapper(
        io.BytesIO(content), newline="", encoding="utf-8-sig", errors="surrogateescape"
    )


def prepare(conn: psycopg.Connection[dict[str, Any]], list_name: str) -> int:
    """Before the first chunk: the list (made if new) and this connection's stage table."""
    with conn.transaction():
        list_id = ensure_list(conn, list_name)
        conn.execute(QUERIES["stage"])
    return list_id


@dataclass
class Merged:
    """What one chunk's merge did."""

    created: int  # subscribers it created
    blocklisted: int  # rows listmonk marked blocklisted, suppressed


def merge(conn: psycopg.Connection[dict[str, Any]], list_id: int, staged: list[Staged]) -> Merged:
    """Upsert one chunk's rows and their memberships (inside the caller's transaction), and
    suppress its listmonk-blocklisted addresses."""
    with conn.cursor().copy(QUERIES["copy_stage"]) as copy:
        for item in staged:
            copy.write_row(item)
    row = conn.execute(QUERIES["merge_batch"], {"list": list_id}).fetchone()
    blocked = sum(1 for item in staged if item[5])
    if blocked:
        conn.execute(QUERIES["suppress_blocklisted"], {"detail": LISTMONK_BLOCKLISTED})
    return Merged(int(row["created"]) if row else 0, blocked)


def import_csv(
    conn: psycopg.Connection[dict[str, Any]],
    path: Path,
    list_name: str,
    on_reject: Reject | None = None,
) -> ImportReport:
    """Import `path` into list `list_name` (created if needed); bad rows are reported, not fatal.

    Each rejected row goes to `on_reject(line, reason)` as it is found, or else onto the
    report (the first KEEP_REJECTED of them).
    """
    report = ImportReport()

    def reject(line: int, reason: str) -> None:
        report.rejected_count += 1
        if on_reject is not None:
            on_reject(line, reason)
        elif len(report.rejected) < KEEP_REJECTED:
            report.rejected.append((line, reason))

    with _open(path) as handle:
        reader = RowReader(handle, path)  # checks the file before touching the database
        list_id = prepare(conn, list_name)
        with conn.transaction():
            conn.execute(QUERIES["seen"])
            conn.execute(QUERIES["forget_seen"])
        ended = False
        while not ended:
            chunk = reader.chunk()
            for line, reason in chunk.rejected:
                reject(line, reason)
            ended = chunk.ended
            if not chunk.staged:
                continue
            with conn.transaction():
                merged = merge(conn, list_id, chunk.staged)
                report.addresses += conn.execute(QUERIES["count_new"]).rowcount
            report.created += merged.created
            report.blocklisted += merged.blocklisted
            report.imported += len(chunk.staged)
        with conn.transaction():
            conn.execute(QUERIES["drop_seen"])  # its rows live as long as the connection
    report.lines = reader.lines
    return report


def write_csv(rows: list[tuple[str, str]]) -> str:
    """A CSV text with an email,name header (used by the demo and tests to make files)."""
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["email", "name"])
    w.writerows(rows)
    return out.getvalue()
