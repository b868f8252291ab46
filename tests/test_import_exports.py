"""Real exports import whole, and a broken one loses nothing without a word (issue 35.1).

The files in tests/data/ keep each exporter's header row, delimiter, quoting, byte order mark
and line ends: Mailchimp's audience export (`Email Address,First Name,Last Name,…`, CRLF),
listmonk's subscriber export, Excel's "CSV UTF-8" in a ';' locale (BOM, ';', CRLF, a line
break inside a cell as LF), Google Sheets (CRLF, no line end after the last row) and Apple
Numbers (LF). Each broken variant edits one line of such a file, as a person with a text
editor does, and is imported through the real command: every line is accounted for, a runaway
quote refuses the file naming its line, and what was in the database before stays.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import Conn, seed_list, senddock, worker_env

DATA = Path(__file__).parent / "data"
NO_SMTP = "smtp://127.0.0.1:9?tls=none"
KEPT = "keep@example.org"  # on the list before every import: never lost


@dataclass(frozen=True)
class Export:
    file: str
    names: dict[str, str]  # lower(email) -> name, what the clean file imports
    mid: tuple[int, str]  # a line in the middle, its quote left open
    end: str  # the last line, its quote left open
    stray: tuple[int, str, str, str]  # line, text with a stray quote, its address, its name
    ragged: tuple[int, str]  # a line with one field too many


FOUR = {
    "ada@example.com": "Ada Lovelace",
    "zoe@bücher.example": "Zoë Bücher",
    "grace@example.com": "Grace Hopper",
    "alan@example.com": "Alan Turing",
}
MC_TAIL = ',"2020-01-01 00:00:00",,"2020-01-01 00:00:00",,,,,,,,,"2023-09-09 09:09:09",3,c1,'

EXPORTS = {
    "mailchimp": Export(
        "mailchimp-subscribed-members.csv",
        FOUR,
        (5, f'grace@example.com,Grace,Hopper,,+1 555 0100,3{MC_TAIL}"call after 5pm,'),
        'ALAN@Example.com,Alan,"Turing',
        (
            5,
            f'grace@example.com,Grace "Amazing",Hopper,,,3{MC_TAIL},',
            "grace@example.com",
            'Grace "Amazing" Hopper',
        ),
        (5, f"grace@example.com,Grace,Hopper,,,3{MC_TAIL},,surplus"),
    ),
    "listmonk": Export(
        "listmonk-subscribers.csv",
        {
            "zoë@bücher.example": "Zoë Bücher",
            "ada@example.com": "Ada Lovelace",
            "blocked@example.com": "Spam Trap",
            "grace@example.com": "Grace Hopper",
            "jürgen@straße.example": "Jürgen, der Blockierte",
        },
        (4, 'c0ffee00-1234-4abc-9def-00112233aabb,blocked@example.com,"Spam Trap,{},blocklisted'),
        'e5f6a7b8-c9d0-4e1f-a2b3-c4d5e6f7a8b9,Jürgen@Straße.example,"Jürgen,{},blocklisted',
        (
            5,
            'd1e2f3a4-b5c6-4d7e-8f90-a1b2c3d4e5f6,grace@example.com,Grace "Amazing" Hopper,{},'
            "disabled,2023-09-09 09:09:09 +0000 UTC,2023-09-09 09:09:09 +0000 UTC",
            "grace@example.com",
            'Grace "Amazing" Hopper',
        ),
        (
            5,
            "d1e2f3a4-b5c6-4d7e-8f90-a1b2c3d4e5f6,grace@example.com,Grace,{},disabled,"
            "2023-09-09 09:09:09 +0000 UTC,2023-09-09 09:09:09 +0000 UTC,surplus",
        ),
    ),
    "excel": Export(
        "excel-semicolon-bom.csv",
        FOUR,
        (2, 'ada@example.com;"Ada Lovelace;London'),
        'alan@example.com;Alan Turing;"Wilmslow',
        (6, 'alan@example.com;Alan "the" Turing;Wilmslow', "alan@example.com", 'Alan "the" Turing'),
        (6, "alan@example.com;Alan Turing;Wilmslow;UK"),
    ),
    "google-sheets": Export(
        "google-sheets.csv",
        {**FOUR, "grace@example.com": "Hopper, Grace"},
        (2, '"Ada Lovelace,ada@example.com,2024-01-02'),
        '"Alan Turing,alan@example.com,2019-05-05',
        (
            2,
            'Ada "Countess" Lovelace,ada@example.com,2024-01-02',
            "ada@example.com",
            'Ada "Countess" Lovelace',
        ),
        (2, "Ada Lovelace,ada@example.com,2024-01-02,London"),
    ),
    "apple-numbers": Export(
        "apple-numbers.csv",
        FOUR,
        (2, 'Ada,"Lovelace,ada@example.com,'),
        'Alan,Turing,alan@example.com,"met at Bletchley',
        (4, 'Grace,Hop"per,grace@example.com,', "grace@example.com", 'Grace Hop"per'),
        (4, "Grace,Hopper,grace@example.com,,admiral"),
    ),
}


def lines_of(path: Path) -> list[str]:
    """The file's physical lines, each with its own line end."""
    return path.read_bytes().decode("utf-8").splitlines(keepends=True)


def edited(tmp_path: Path, export: Export, line: int, text: str) -> Path:
    """A copy of the export with line `line` (1-based) replaced by `text`, its end kept."""
    lines = lines_of(DATA / export.file)
    old = lines[line - 1]
    end = old[len(old.rstrip("\r\n")) :]
    lines[line - 1] = text + end
    path = tmp_path / export.file
    bom = "\ufeff" if line == 1 and lines[0].startswith("\ufeff") else ""
    path.write_bytes((bom + "".join(lines)).encode("utf-8"))
    return path


def run_import(db_url: str, path: Path) -> subprocess.CompletedProcess[str]:
    env = worker_env(db_url, NO_SMTP)
    return senddock(env, "subscribers", "import", str(path), "--list", "news")


def members(conn: Conn) -> dict[str, str]:
    rows = conn.execute(
        "SELECT lower(s.email) AS e, s.name FROM list_memberships m"
        " JOIN lists l ON l.id = m.list_id JOIN subscribers s ON s.id = m.subscriber_id"
        " WHERE l.name = 'news'"
    ).fetchall()
    return {str(r["e"]): str(r["name"]) for r in rows}


def accounted(proc: subprocess.CompletedProcess[str], path: Path, imported: int, bad: int) -> None:
    """The summary names every line of the file: header + imported + rejected + inside."""
    lines = lines_of(path)
    inside = len(lines) - 1 - imported - bad
    tail = f"{len(lines)} lines: 1 header + {imported} imported + {bad} rejected"
    tail += f" + {inside} inside quoted fields" if inside else ""
    assert proc.stdout.strip().endswith(tail), proc.stdout


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_a_real_export_imports_every_row_with_its_name(name: str, db_url: str, conn: Conn) -> None:
    export = EXPORTS[name]
    seed_list(conn, "news", [KEPT])
    path = DATA / export.file
    proc = run_import(db_url, path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    n = len(export.names)
    assert proc.stdout.startswith(f"imported {n} rows into 'news': {n} subscribers ({n} new)")
    accounted(proc, path, n, 0)
    assert members(conn) == {KEPT: "Name 1", **export.names}


@pytest.mark.parametrize("where", ["mid", "end"])
@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_an_unclosed_quote_refuses_the_file_naming_its_line_and_imports_nothing(
    name: str, where: str, db_url: str, conn: Conn, tmp_path: Path
) -> None:
    export = EXPORTS[name]
    seed_list(conn, "news", [KEPT])
    last = len(lines_of(DATA / export.file))
    line, text = export.mid if where == "mid" else (last, export.end)
    path = edited(tmp_path, export, line, text)
    proc = run_import(db_url, path)
    assert proc.returncode != 0
    assert proc.stdout == ""
    error = proc.stderr.strip()
    assert "\n" not in error and "Traceback" not in error, error
    assert error.startswith(f"senddock: error: {path}:{line}: a quote opened in this row "), error
    assert error.endswith("nothing was imported"), error
    if where == "end":
        assert "to the end of the file" in error, error
    assert members(conn) == {KEPT: "Name 1"}
    assert conn.execute("SELECT count(*) AS n FROM subscribers").fetchone() == {"n": 1}


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_a_stray_quote_inside_a_field_is_kept_as_text(
    name: str, db_url: str, conn: Conn, tmp_path: Path
) -> None:
    export = EXPORTS[name]
    line, text, address, quoted = export.stray
    path = edited(tmp_path, export, line, text)
    proc = run_import(db_url, path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    accounted(proc, path, len(export.names), 0)
    assert members(conn) == {**export.names, address: quoted}


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_a_ragged_row_is_rejected_by_its_line_and_the_rest_imported(
    name: str, db_url: str, conn: Conn, tmp_path: Path
) -> None:
    export = EXPORTS[name]
    seed_list(conn, "news", [KEPT])
    line, text = export.ragged
    path = edited(tmp_path, export, line, text)
    proc = run_import(db_url, path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == f"{path}:{line}: rejected: more fields than the header"
    accounted(proc, path, len(export.names) - 1, 1)
    dropped = {e for e in export.names if e in text.lower()}
    assert len(dropped) == 1
    kept = {e: n for e, n in export.names.items() if e not in dropped}
    assert members(conn) == {KEPT: "Name 1", **kept}


def test_a_suppression_import_with_an_unclosed_quote_suppresses_nobody_and_says_where(
    db_url: str, conn: Conn, tmp_path: Path
) -> None:
    """`suppressions import` reads files as the subscriber import does: an open quote that
    would swallow addresses (each then left sendable, without a word) refuses the file.
    Fails without the fix: exit 0, Ada suppressed, Bob and the 50 after him one rejected row."""
    path = tmp_path / "blocked.csv"
    rows = ["email,reason", "ada@example.com,manual", 'bob@example.com,"complaint']
    rows += [f"user{i}@example.com,manual" for i in range(50)]
    path.write_text("\r\n".join(rows) + "\r\n", encoding="utf-8")
    proc = senddock(worker_env(db_url, NO_SMTP), "suppressions", "import", str(path))
    assert proc.returncode != 0, proc.stdout
    error = proc.stderr.strip()
    assert "\n" not in error and f"{path}:3: a quote opened in this row" in error, error
    assert error.endswith("nothing was imported"), error
    assert conn.execute("SELECT count(*) AS n FROM suppressions").fetchone() == {"n": 0}
