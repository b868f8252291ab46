"""The suppression list: addresses no broadcast sends to, whatever list they are on.

An address is suppressed by a bounce (delivery), an unsubscribe (the link in every message),
a complaint, or by hand. The claim statement checks it too, so suppressing an address also
stops broadcasts that already enqueued it.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import psycopg

from senddock.audience import cells, importer
from senddock.audience.addresses import InvalidAddress, normalize
from senddock.db import sql
from senddock.errors import Invalid

REASONS = ("bounce", "unsubscribe", "complaint", "manual")

QUERIES = sql.load(__package__, "suppressions.sql")

Conn = psycopg.Connection[dict[str, Any]]


class UnknownReason(Invalid, ValueError):
    """Not one of the suppression reasons (422, about `reason`)."""


@dataclass
class SuppressionImport:
    added: int = 0
    already: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)


def add(conn: Conn, address: str, reason: str = "manual", detail: str | None = None) -> bool:
    """Suppress `address`; False if it already was (its first reason is kept)."""
    if reason not in REASONS:
        raise UnknownReason(
            f"reason must be one of {', '.join(REASONS)}, got {reason!r}", field="reason"
        )
    email = normalize(address)
    params = {"email": email, "reason": reason, "broadcast": None, "detail": detail}
    return conn.execute(QUERIES["suppress"], params).rowcount == 1


def remove(conn: Conn, address: str) -> bool:
    """Make `address` sendable again; False if it was not suppressed."""
    with conn.transaction():
        gone = conn.execute(QUERIES["unsuppress"], {"email": address.strip()}).rowcount
        if gone:
            conn.execute(QUERIES["untag_bounced"], {"email": address.strip()})
    return gone > 0


@dataclass(frozen=True)
class SuppressionRow:
    """A suppressed address as every face lists it: why (and, for a bounce, its reason such
    as userunknown), since when, the broadcast that caused it, the detail ('' when none)."""

    email: str
    reason: str
    created_at: datetime
    source_broadcast_id: int | None
    detail: str
    bounce_reason: str | None

    @property
    def why(self) -> str:
        """The reason, with the bounce's own reason beside it: `bounce (userunknown)`."""
        return f"{self.reason} ({self.bounce_reason})" if self.bounce_reason else self.reason


def rows(conn: Conn, reason: str | None = None) -> list[SuppressionRow]:
    """Every suppressed address, alphabetically, optionally of one reason."""
    return [SuppressionRow(**row) for row in conn.execute(QUERIES["list"], {"reason": reason})]


def is_suppressed(conn: Conn, address: str) -> bool:
    row = conn.execute(QUERIES["is_suppressed"], {"email": address.strip()}).fetchone()
    return row is not None


def export_csv(conn: Conn, out: TextIO, reason: str | None = None) -> int:
    """Write email,reason,created_at,detail rows; the number written."""
    w = csv.writer(out)
    w.writerow(["email", "reason", "created_at", "detail"])
    n = 0
    for r in rows(conn, reason):
        w.writerow(cells.row([r.email, r.reason, r.created_at.isoformat(), r.detail]))
        n += 1
    return n


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, str] | str]]:
    """(line, cells by column name, or why the row cannot be read) of each row, read as the
    subscriber import reads a file: a runaway quote refuses it whole (UnreadableFile) before
    a row is handed out, so no address it would swallow is silently left unsuppressed."""
    with importer.open_csv(path) as handle:
        fields, rows = importer.checked_rows(handle, path, importer.Lines())
        for line, row in rows:
            yield line, row if isinstance(row, str) else dict(zip(fields, row, strict=False))


def import_csv(conn: Conn, path: Path, reason: str = "manual") -> SuppressionImport:
    """Suppress every address of a CSV with an `email` column (`reason` column optional)."""
    report = SuppressionImport()
    with conn.transaction():
        for line, row in _csv_rows(path):
            if isinstance(row, str):
                report.rejected.append((line, row))
                continue
            try:
                email = normalize(cells.uncell(row.get("email") or ""))
            except InvalidAddress as exc:
                report.rejected.append((line, str(exc)))
                continue
            why = (row.get("reason") or reason).strip()
            if why not in REASONS:
                report.rejected.append((line, f"unknown reason {why!r}"))
                continue
            params = {"email": email, "reason": why, "broadcast": None, "detail": "import"}
            if conn.execute(QUERIES["suppress"], params).rowcount:
                report.added += 1
            else:
                report.already += 1
    return report


def unsubscribe(conn: Conn, subscriber_id: int, campaign_id: int, detail: str) -> bool:
    """Suppress the subscriber (reason `unsubscribe`) and leave the campaign's list.

    Idempotent. False when there is no such subscriber (deleted since): nothing to do.
    """
    params = {"subscriber": subscriber_id, "campaign": campaign_id, "detail": detail}
    with conn.transaction():
        found = conn.execute(QUERIES["lock_subscriber"], params).fetchone()
        if found is None:
            return False
        conn.execute(QUERIES["unsubscribe_suppress"], params)
        conn.execute(QUERIES["unsubscribe_memberships"], params)
    return True


@dataclass(frozen=True)
class LinkSubject:
    """Who an unsubscribe link is about, as its page shows them: the address, the names of
    its campaign's lists ([] for a campaign that is gone), whether it is suppressed already."""

    email: str
    list_names: list[str]
    suppressed: bool


def who(conn: Conn, subscriber_id: int, campaign_id: int) -> LinkSubject | None:
    """What an unsubscribe link is about; None when the subscriber is gone."""
    params = {"subscriber": subscriber_id, "campaign": campaign_id}
    row = conn.execute(QUERIES["who"], params).fetchone()
    return LinkSubject(**row) if row else None
