"""CSV import: stream rows, report bad ones by line, upsert the rest in batches.

Re-importing updates rather than duplicates (one subscriber per address, case-insensitive).
A suppressed address can be imported, but suppression still keeps it from every broadcast.
"""

from __future__ import annotations

import csv
import io
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from senddock.audience.addresses import InvalidAddress, normalize
from senddock.audience.lists import ensure_list

BATCH = 5000

# Stage a batch, then upsert subscribers and memberships with set-based statements.
STAGE = "CREATE TEMP TABLE IF NOT EXISTS import_stage (line int, email text, name text)"
UPSERT_SUBSCRIBERS = """
INSERT INTO subscribers (email, name)
SELECT DISTINCT ON (lower(email)) email, coalesce(name, '') FROM import_stage
ORDER BY lower(email), line DESC
ON CONFLICT ((lower(email))) DO UPDATE
SET name = CASE WHEN EXCLUDED.name <> '' THEN EXCLUDED.name ELSE subscribers.name END,
    updated_at = now()
"""
JOIN_LIST = """
INSERT INTO list_memberships (list_id, subscriber_id)
SELECT %(list)s, s.id FROM import_stage i JOIN subscribers s ON lower(s.email) = lower(i.email)
ON CONFLICT DO NOTHING
"""


class UnreadableFile(OSError):
    """The CSV cannot be read at all (missing, not text, no header, no email column)."""


@dataclass
class ImportReport:
    imported: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)


def _rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        handle = path.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise UnreadableFile(f"cannot read {path}: {exc.strerror or exc}") from exc
    with handle:
        try:
            reader = csv.DictReader(handle)
            fields = [f.strip().lower() for f in (reader.fieldnames or [])]
        except (UnicodeDecodeError, csv.Error) as exc:
            raise UnreadableFile(f"cannot read {path}: {exc}") from exc
        if "email" not in fields:
            raise UnreadableFile(f"{path}: the header row has no 'email' column")
        reader.fieldnames = fields
        try:
            for row in reader:
                yield reader.line_num, row
        except (UnicodeDecodeError, csv.Error) as exc:
            raise UnreadableFile(f"{path}, line {reader.line_num + 1}: {exc}") from exc


def import_csv(
    conn: psycopg.Connection[dict[str, Any]], path: Path, list_name: str
) -> ImportReport:
    """Import `path` into list `list_name` (created if needed); bad rows are reported, not fatal."""
    report = ImportReport()
    rows = _rows(path)
    first = next(rows, None)  # opens the file and checks the header before touching the database
    with conn.transaction():
        list_id = ensure_list(conn, list_name)
        conn.execute(STAGE)
    batch: list[tuple[int, str, str]] = []

    def flush() -> None:
        if not batch:
            return
        with conn.transaction():
            conn.execute("TRUNCATE import_stage")
            with conn.cursor().copy("COPY import_stage (line, email, name) FROM STDIN") as copy:
                for item in batch:
                    copy.write_row(item)
            conn.execute(UPSERT_SUBSCRIBERS)
            conn.execute(JOIN_LIST, {"list": list_id})
        report.imported += len(batch)
        batch.clear()

    for line, row in itertools.chain([first] if first else [], rows):
        raw = (row.get("email") or "").strip()
        name = (row.get("name") or "").strip()
        if None in row:
            report.rejected.append((line, "more fields than the header"))
            continue
        if not raw:
            report.rejected.append((line, "no email address"))
            continue
        try:
            address = normalize(raw)
        except InvalidAddress as exc:
            report.rejected.append((line, str(exc)))
            continue
        if "\r" in name or "\n" in name:
            report.rejected.append((line, "name contains a line break"))
            continue
        batch.append((line, address, name))
        if len(batch) >= BATCH:
            flush()
    flush()
    return report


def write_csv(rows: list[tuple[str, str]]) -> str:
    """A CSV text with an email,name header (used by the demo and tests to make files)."""
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["email", "name"])
    w.writerows(rows)
    return out.getvalue()
