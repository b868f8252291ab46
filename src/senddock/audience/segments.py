"""Saved segments: a filter by name, and how many subscribers a filter reaches.

The language itself is segment_filter.py; here are the rows of `segments` and the count a
person sees before sending (`senddock segment count`, `campaign preview`, the dashboard form).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql as pgsql

from senddock.audience.segment_filter import SegmentError, check, condition
from senddock.db import sql
from senddock.errors import Conflict, Invalid, NotFound

QUERIES = sql.load(__package__, "segments.sql")

Conn = psycopg.Connection[dict[str, Any]]

MAX_NAME = 100

__all__ = [
    "Segment",
    "SegmentError",
    "SegmentInUse",
    "UnknownSegment",
    "add",
    "all_segments",
    "by_id",
    "count",
    "delete",
    "find",
]


class UnknownSegment(NotFound, LookupError):
    """No segment by that name (404)."""


class SegmentInUse(Conflict):
    """A segment that exists already, or that a campaign names (409)."""


@dataclass(frozen=True)
class Segment:
    id: int
    name: str
    filter: str
    created_at: datetime
    updated_at: datetime


def _segment(row: dict[str, Any]) -> Segment:
    return Segment(int(row["id"]), row["name"], row["filter"], row["created_at"], row["updated_at"])


def add(conn: Conn, name: str, filter_text: str) -> Segment:
    """Save filter `filter_text` as segment `name` (SegmentError if it does not parse)."""
    name = name.strip()
    if not name or len(name) > MAX_NAME or not name.isprintable():
        raise Invalid(f"a segment name is 1 to {MAX_NAME} printable characters", field="name")
    text = check(filter_text)
    try:
        with conn.transaction():
            row = conn.execute(QUERIES["add_segment"], {"name": name, "filter": text}).fetchone()
    except psycopg.errors.UniqueViolation:
        raise SegmentInUse(f"a segment named {name!r} exists already", field="name") from None
    assert row is not None
    return find(conn, name)


def all_segments(conn: Conn) -> list[Segment]:
    """Every saved segment, by name."""
    return [_segment(r) for r in conn.execute(QUERIES["all_segments"]).fetchall()]


def find(conn: Conn, name: str) -> Segment:
    """Segment `name` (UnknownSegment if there is none)."""
    row = conn.execute(QUERIES["find_segment"], {"name": name}).fetchone()
    if row is None:
        raise UnknownSegment(f"no segment named {name!r}", field="segment")
    return _segment(row)


def by_id(conn: Conn, segment_id: int) -> Segment:
    """Segment `segment_id` (UnknownSegment if there is none)."""
    row = conn.execute(QUERIES["segment_by_id"], {"id": segment_id}).fetchone()
    if row is None:
        raise UnknownSegment(f"no segment with id {segment_id}", field="segment")
    return _segment(row)


def delete(conn: Conn, name: str) -> None:
    """Delete segment `name`; refused while a campaign names it."""
    find(conn, name)
    try:
        with conn.transaction():
            conn.execute(QUERIES["delete_segment"], {"name": name})
    except psycopg.errors.IntegrityError:  # RESTRICT: a campaign names it
        raise SegmentInUse(
            f"segment {name!r} is named by a campaign: it cannot be deleted", field="segment"
        ) from None


def count(conn: Conn, filter_text: str | None, list_ids: Sequence[int] | None = None) -> int:
    """How many active, unsuppressed subscribers (confirmed on any of `list_ids`, or anyone
    when None) match `filter_text` now: who a broadcast sent now would go to."""
    where = condition(filter_text)
    statement = pgsql.SQL(QUERIES["audience_count"]).format(audience=where.sql)
    params = {"lists": None if list_ids is None else list(list_ids), **where.params}
    row = conn.execute(statement, params).fetchone()
    return int(row["n"]) if row else 0


@dataclass(frozen=True)
class Sample:
    """A subscriber a preview or a test send renders as: id, address, name, attributes."""

    id: int
    email: str
    name: str
    attributes: dict[str, Any]


def first(conn: Conn, filter_text: str | None, list_ids: Sequence[int]) -> Sample | None:
    """The first (lowest id) of those `count` counts; None when nobody would receive it."""
    where = condition(filter_text)
    statement = pgsql.SQL(QUERIES["audience_first"]).format(audience=where.sql)
    params = {"lists": list(list_ids), **where.params}
    row = conn.execute(statement, params).fetchone()
    return Sample(**row) if row else None
