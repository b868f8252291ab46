"""A list's members as CSV, streamed from a server-side cursor (flat memory at any size)."""

from __future__ import annotations

import csv
import json
from typing import Any, TextIO

import psycopg

from senddock.audience import cells
from senddock.audience.lists import find_list
from senddock.db import sql

QUERIES = sql.load(__package__, "export.sql")
COLUMNS = ("email", "name", "status", "attributes", "suppressed")


def export_list(conn: psycopg.Connection[dict[str, Any]], list_name: str, out: TextIO) -> int:
    """Write every member of `list_name` with a header row; the number of members written.

    The file imports back as it is: `attributes` is a JSON object column. Cells a spreadsheet
    would run as formulas are written as text (audience/cells.py).
    """
    list_id = find_list(conn, list_name)
    w = csv.writer(out)
    w.writerow(COLUMNS)
    n = 0
    with conn.transaction(), conn.cursor(name="senddock_export") as cur:
        cur.itersize = 5000
        cur.execute(QUERIES["members"], {"list": list_id})
        for r in cur:
            attrs = json.dumps(r["attributes"], ensure_ascii=False) if r["attributes"] else ""
            suppressed = "yes" if r["suppressed"] else ""
            w.writerow(cells.row([r["email"], r["name"], r["status"], attrs, suppressed]))
            n += 1
    return n
