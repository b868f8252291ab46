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
    """The CSV cannot be read at all (missing, not text, no header, no email column): 422,
    about the uploaded `file`."""


@dataclass
class ImportReport:
    imported: int = 0  # rows imported
    rejected: list[tuple[int, str]] = field(default_factory=list)
    rejected_count: int = 0
    addresses: int = 0  # distinct addresses among them (case-insensitive): subscribers
    blocklisted: int = 0  # listmonk rows marked blocklisted: imported and suppressed

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
NOT_UTF8 = re.compile("[\udc80-\udcff]")  # what errors="surrogateescape" makes of bad bytes

Row = list[str] | str  # the fields, or why the row cannot be read


def _open(path: Path) -> io.TextIOWrapper:
    try:
        return path.open(newline="", encoding="utf-8-sig", errors="surrogateescape")
    except OSError as exc:
        raise UnreadableFile(f"cannot read {path}: {exc.strerror or exc}", field="file") from exc


def _rows(handle: io.TextIOWrapper) -> Iterator[tuple[int, Row]]:
    """(line the row starts on, fields or why not) for every non-blank row."""
    reader = csv.reader(handle)
    line = 1
    while True:
        try:
            row: Row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            row = f"cannot be read as CSV: {exc}"
        if row:
            yield line, row
        line = reader.line_num + 1


def _header(path: Path, rows: Iterator[tuple[int, Row]]) -> list[str]:
    first = next(rows, None)
    if first is not None and isinstance(first[1], str):
        raise UnreadableFile(f"{path}: the header row {first[1]}", field="file")
    fields = [f.strip().lower() for f in first[1]] if first else []
    if "email" not in fields:
        hint = _delimiter_hint(list(first[1])) if first else ""
        raise UnreadableFile(f"{path}: the header row has no 'email' column{hint}", field="file")
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


# Delimiters spreadsheets write instead of commas (Excel in many locales writes ';').
_OTHER_DELIMITERS = {";": "';'", "\t": "tab", "|": "'|'"}


def _delimiter_hint(header: list[str]) -> str:
    """Why a header that has an email column under another delimiter has none, or ''."""
    line = ",".join(header)
    for delimiter, name in _OTHER_DELIMITERS.items():
        fields = [f.strip().strip('"').lower() for f in line.split(delimiter)]
        if "email" in fields:
            return (
                f"; the file looks {name}-delimited: save it as comma-separated CSV"
                " (in a spreadsheet: Save as CSV, field delimiter ',')"
            )
    return ""


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
        name = row[self.name].strip() if self.name is not None else ""
        if "\r" in name or "\n" in name:
            return "name contains a line break"
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


class RowReader:
    """The data rows of an open CSV, checked, a chunk at a time (the header is checked at once:
    UnreadableFile)."""

    def __init__(self, handle: io.TextIOWrapper, path: Path) -> None:
        self._rows = _rows(handle)
        self._parser = _Parser(_header(path, self._rows))

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


def open_bytes(content: bytes) -> io.TextIOWrapper:
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


def merge(conn: psycopg.Connection[dict[str, Any]], list_id: int, staged: list[Staged]) -> int:
    """Upsert one chunk's rows and their memberships (inside the caller's transaction), and
    suppress its listmonk-blocklisted addresses; how many rows were blocklisted."""
    with conn.cursor().copy(QUERIES["copy_stage"]) as copy:
        for item in staged:
            copy.write_row(item)
    conn.execute(QUERIES["merge_batch"], {"list": list_id})
    blocked = sum(1 for item in staged if item[5])
    if blocked:
        conn.execute(QUERIES["suppress_blocklisted"], {"detail": LISTMONK_BLOCKLISTED})
    return blocked


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
                report.blocklisted += merge(conn, list_id, chunk.staged)
                report.addresses += conn.execute(QUERIES["count_new"]).rowcount
            report.imported += len(chunk.staged)
        with conn.transaction():
            conn.execute(QUERIES["drop_seen"])  # its rows live as long as the connection
    return report


def write_csv(rows: list[tuple[str, str]]) -> str:
    """A CSV text with an email,name header (used by the demo and tests to make files)."""
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["email", "name"])
    w.writerows(rows)
    return out.getvalue()
