"""Subscribers as CSV: a list's members, or everyone, either narrowed by a segment filter,
streamed from a server-side cursor (flat memory at any size)."""

from __future__ import annotations

import csv
import json
from typing import Any, TextIO

import psycopg
from psycopg import sql as pgsql

from senddock.audience import cells, segment_filter
from senddock.audience.lists import find_list
from senddock.db import sql

QUERIES = sql.load(__package__, "export.sql")
COLUMNS = ("email", "name", "status", "attributes", "suppressed")


def export_subscribers(
    conn: psycopg.Connection[dict[str, Any]],
    out: TextIO,
    list_name: str | None = None,
    filter_text: str | None = None,
) -> int:
    """Write the members of `list_name` (everyone when None) that match `filter_text` (the
    segment filter language; everyone when None), with a header row; how many were written.

    `status` is the membership's on a list, the subscriber's otherwise. The file imports back
    as it is: `attributes` is a JSON object column. Cells a spreadsheet would run as formulas
    are written as text (audience/cells.py).
    """
    where = segment_filter.condition(filter_text)  # a bad filter fails before any row
    params: dict[str, Any] = dict(where.params)
    if list_name is not None:
        params["list"] = find_list(conn, list_name)
    statement = pgsql.SQL(QUERIES["members" if list_name is not None else "everyone"]).format(
        audience=where.sql
    )
    w = csv.writer(out)
    w.writerow(COLUMNS)
    n = 0
    with conn.transaction(), conn.cursor(name="senddock_export") as cur:
        cur.itersize = 5000
        cur.execute(statement, params)
        for r in cur:
            attrs = json.dumps(r["attributes"], ensure_ascii=False) if r["attributes"] else ""
            suppressed = "yes" if r["suppressed"] else ""
            w.writerow(cells.row([r["email"], r["name"], r["status"], attrs, suppressed]))
            n += 1
    return n


def export_list(conn: psycopg.Connection[dict[str, Any]], list_name: str, out: TextIO) -> int:
    """Every member of `list_name` (export_subscribers of one list, no filter)."""
    return export_subscribers(conn, out, list_name)
