"""The suppression list: addresses no broadcast sends to, whatever list they are on.

An address is suppressed by a bounce (delivery), an unsubscribe (the link in every message),
a complaint, or by hand. The claim statement checks it too, so suppressing an address also
stops broadcasts that already enqueued it.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import psycopg

from senddock.audience import cells
from senddock.audience.addresses import InvalidAddress, normalize

REASONS = ("bounce", "unsubscribe", "complaint", "manual")

SUPPRESS = """
INSERT INTO suppressions (email, reason, source_broadcast_id, detail)
VALUES (%(email)s, %(reason)s, %(broadcast)s, %(detail)s)
ON CONFLICT ((lower(email))) DO NOTHING
"""
# Removing a suppression makes the address sendable again: a bounce tag goes too.
UNSUPPRESS = "DELETE FROM suppressions WHERE lower(email) = lower(%(email)s)"
UNTAG_BOUNCED = """
UPDATE subscribers SET status = 'active', updated_at = now()
WHERE lower(email) = lower(%(email)s) AND status = 'bounced'
"""
LIST = """
SELECT email, reason, created_at, source_broadcast_id, coalesce(detail, '') AS detail
FROM suppressions WHERE (%(reason)s::text IS NULL OR reason = %(reason)s) ORDER BY lower(email)
"""

# One-click unsubscribe: suppress the address and leave every list the campaign went to.
# One transaction, idempotent: a second click changes nothing.
UNSUBSCRIBE_SUPPRESS = """
INSERT INTO suppressions (email, reason, source_broadcast_id, detail)
SELECT s.email, 'unsubscribe', c.broadcast_id, %(detail)s
FROM subscribers s LEFT JOIN campaigns c ON c.id = %(campaign)s
WHERE s.id = %(subscriber)s
ON CONFLICT ((lower(email))) DO NOTHING
"""
UNSUBSCRIBE_MEMBERSHIPS = """
UPDATE list_memberships m SET status = 'unsubscribed', updated_at = now()
FROM campaigns c
WHERE c.id = %(campaign)s AND m.list_id = c.list_id AND m.subscriber_id = %(subscriber)s
  AND m.status <> 'unsubscribed'
"""
WHO = """
SELECT s.email, l.name AS list_name,
       EXISTS (SELECT 1 FROM suppressions x WHERE lower(x.email) = lower(s.email)) AS suppressed
FROM subscribers s LEFT JOIN campaigns c ON c.id = %(campaign)s
LEFT JOIN lists l ON l.id = c.list_id
WHERE s.id = %(subscriber)s
"""

Conn = psycopg.Connection[dict[str, Any]]


class UnknownReason(ValueError):
    """Not one of the suppression reasons."""


@dataclass
class SuppressionImport:
    added: int = 0
    already: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)


def add(conn: Conn, address: str, reason: str = "manual", detail: str | None = None) -> bool:
    """Suppress `address`; False if it already was (its first reason is kept)."""
    if reason not in REASONS:
        raise UnknownReason(f"reason must be one of {', '.join(REASONS)}, got {reason!r}")
    email = normalize(address)
    params = {"email": email, "reason": reason, "broadcast": None, "detail": detail}
    return conn.execute(SUPPRESS, params).rowcount == 1


def remove(conn: Conn, address: str) -> bool:
    """Make `address` sendable again; False if it was not suppressed."""
    with conn.transaction():
        gone = conn.execute(UNSUPPRESS, {"email": address.strip()}).rowcount
        if gone:
            conn.execute(UNTAG_BOUNCED, {"email": address.strip()})
    return gone > 0


def rows(conn: Conn, reason: str | None = None) -> list[dict[str, Any]]:
    """Every suppressed address, alphabetically, optionally of one reason."""
    return conn.execute(LIST, {"reason": reason}).fetchall()


def is_suppressed(conn: Conn, address: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM suppressions WHERE lower(email) = lower(%s)", (address.strip(),)
    ).fetchone()
    return row is not None


def export_csv(conn: Conn, out: TextIO, reason: str | None = None) -> int:
    """Write email,reason,created_at,detail rows; the number written."""
    w = csv.writer(out)
    w.writerow(["email", "reason", "created_at", "detail"])
    n = 0
    for r in rows(conn, reason):
        w.writerow(cells.row([r["email"], r["reason"], r["created_at"].isoformat(), r["detail"]]))
        n += 1
    return n


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        fields = [f.strip().lower() for f in (reader.fieldnames or [])]
        if "email" not in fields:
            raise ValueError(f"{path}: the header row has no 'email' column")
        reader.fieldnames = fields
        start = reader.line_num + 1
        for row in reader:
            yield start, row
            start = reader.line_num + 1


def import_csv(conn: Conn, path: Path, reason: str = "manual") -> SuppressionImport:
    """Suppress every address of a CSV with an `email` column (`reason` column optional)."""
    report = SuppressionImport()
    with conn.transaction():
        for line, row in _csv_rows(path):
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
            if conn.execute(SUPPRESS, params).rowcount:
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
        found = conn.execute(
            "SELECT 1 FROM subscribers WHERE id = %(subscriber)s FOR UPDATE", params
        ).fetchone()
        if found is None:
            return False
        conn.execute(UNSUBSCRIBE_SUPPRESS, params)
        conn.execute(UNSUBSCRIBE_MEMBERSHIPS, params)
    return True


def who(conn: Conn, subscriber_id: int, campaign_id: int) -> dict[str, Any] | None:
    """The address and list a link is about, and whether it is suppressed already."""
    return conn.execute(WHO, {"subscriber": subscriber_id, "campaign": campaign_id}).fetchone()


def csv_text(rows_: list[tuple[str, str]]) -> str:
    out = io.StringIO()
    csv.writer(out).writerows(rows_)
    return out.getvalue()
