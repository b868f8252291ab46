"""CSV import at scale and export: streamed, bad rows named by line, re-import updates, and
suppression or unsubscription always wins over what a file says."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from senddock.audience import import_csv, suppressions
from senddock.audience.addresses import InvalidAddress, _slow, normalize
from senddock.audience.export import export_list
from senddock.campaigns import broadcast
from support import Conn, jobs, new_campaign

BAD = [
    ("not-an-address,Bad,", "invalid address"),
    (",Nobody,", "no email address"),
    ("extra{i}@example.com,Extra,,surplus", "more fields than the header"),
    ("nul{i}@example.com,Bad\x00Name,", "NUL"),
    ('json{i}@example.com,J,"{{not json"', "not valid JSON"),
    ('list{i}@example.com,J,"[1, 2]"', "not a JSON object"),
    ("dots..{i}@example.com,D,", "invalid address"),
]


def members(conn: Conn, list_name: str) -> dict[str, tuple[str, str]]:
    rows = conn.execute(
        "SELECT lower(s.email) AS email, s.name, m.status FROM list_memberships m"
        " JOIN subscribers s ON s.id = m.subscriber_id JOIN lists l ON l.id = m.list_id"
        " WHERE l.name = %s",
        (list_name,),
    ).fetchall()
    return {r["email"]: (r["name"], r["status"]) for r in rows}


def test_a_100k_row_import_reports_every_bad_row_by_line_and_imports_the_rest(
    conn: Conn, tmp_path: Path
) -> None:
    path = tmp_path / "big.csv"
    expected_bad: dict[int, str] = {}
    good: dict[str, str] = {}
    with path.open("w", encoding="utf-8", newline="") as f:
        f.write("email,name,attributes\n")
        line = 1
        for i in range(100_000):
            line += 1
            if i % 500 == 7:
                row, why = BAD[(i // 500) % len(BAD)]
                f.write(row.format(i=i) + "\n")
                expected_bad[line] = why
            elif i % 1000 == 3:
                # The same person again, other case: the later row wins, no duplicate.
                f.write(f"USER{i - 1}@Example.COM,Renamed {i - 1},\n")
                good[f"user{i - 1}@example.com"] = f"Renamed {i - 1}"
            else:
                f.write(f'user{i}@example.com,User {i},"{{""n"": {i}}}"\n')
                good[f"user{i}@example.com"] = f"User {i}"
    rejected: dict[int, str] = {}
    report = import_csv(conn, path, "big", on_reject=lambda n, why: rejected.__setitem__(n, why))
    assert sorted(rejected) == sorted(expected_bad)
    for n, why in expected_bad.items():
        assert why in rejected[n], (n, rejected[n])
    assert report.rejected_count == len(expected_bad) == 200
    assert report.imported == 100_000 - 200
    got = members(conn, "big")
    assert len(got) == len(good)
    assert {k: v[0] for k, v in got.items()} == good
    attrs = conn.execute(
        "SELECT attributes FROM subscribers WHERE email = 'user42@example.com'"
    ).fetchone()
    assert attrs == {"attributes": {"n": 42}}


def test_reimport_updates_and_merges_but_never_undoes_a_suppression_or_an_unsubscribe(
    conn: Conn, tmp_path: Path
) -> None:
    first = tmp_path / "a.csv"
    first.write_text(
        "email,name,city\nada@example.com,Ada,London\nbob@example.com,Bob,Paris\n"
        "eve@example.com,Eve,Rome\n",
        encoding="utf-8",
    )
    import_csv(conn, first, "news")
    suppressions.add(conn, "bob@example.com", "unsubscribe")
    conn.execute(
        "UPDATE list_memberships SET status = 'unsubscribed'"
        " WHERE subscriber_id = (SELECT id FROM subscribers WHERE email = 'eve@example.com')"
    )

    second = tmp_path / "b.csv"
    second.write_text(
        'email,name,plan,attributes\nADA@example.com,Ada Lovelace,pro,"{""n"": 1}"\n'
        "bob@example.com,Bob,,\neve@example.com,,,\n",
        encoding="utf-8",
    )
    report = import_csv(conn, second, "news")
    assert (report.imported, report.rejected) == (3, [])
    assert conn.execute("SELECT count(*) AS n FROM subscribers").fetchone() == {"n": 3}
    ada = conn.execute(
        "SELECT name, attributes FROM subscribers WHERE email = 'ada@example.com'"
    ).fetchone()
    assert ada == {"name": "Ada Lovelace", "attributes": {"city": "London", "plan": "pro", "n": 1}}
    # An empty name keeps the one we had.
    assert members(conn, "news")["eve@example.com"] == ("Eve", "unsubscribed")
    assert suppressions.is_suppressed(conn, "bob@example.com")
    bid, total, _ = broadcast(conn, new_campaign(conn, "news"))
    assert (total, sorted(jobs(conn, bid))) == (1, ["ada@example.com"])


def test_export_writes_every_member_and_imports_back_the_same(conn: Conn, tmp_path: Path) -> None:
    source = tmp_path / "in.csv"
    source.write_text(
        'email,name,attributes\nada@example.com,"Lovelace, Ada","{""city"": ""Zürich""}"\n'
        "bob@example.com,Bob,\n",
        encoding="utf-8",
    )
    import_csv(conn, source, "news")
    suppressions.add(conn, "bob@example.com")
    out = io.StringIO()
    assert export_list(conn, "news", out) == 2
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [(r["email"], r["name"], r["status"], r["suppressed"]) for r in rows] == [
        ("ada@example.com", "Lovelace, Ada", "confirmed", ""),
        ("bob@example.com", "Bob", "confirmed", "yes"),
    ]
    assert json.loads(rows[0]["attributes"]) == {"city": "Zürich"}

    again = tmp_path / "out.csv"
    again.write_text(out.getvalue(), encoding="utf-8")
    report = import_csv(conn, again, "copy")
    assert report.rejected == []
    assert members(conn, "copy") == {
        "ada@example.com": ("Lovelace, Ada", "confirmed"),
        "bob@example.com": ("Bob", "confirmed"),
    }
    # `status` and `suppressed` are export columns, not attributes.
    row = conn.execute("SELECT attributes FROM subscribers WHERE email = 'ada@example.com'")
    assert row.fetchone() == {"attributes": {"city": "Zürich"}}


ADDRESSES = [
    "a@b.com",
    "A.B+tag@Example.COM",
    "a..b@x.com",
    ".a@x.com",
    "a.@x.com",
    "a@localhost",
    "a@x.local",
    "a@x.test",
    "a@x.invalid",
    "x@-a.com",
    "x@a_b.com",
    "x@123.45.67.89",
    "x@[1.2.3.4]",
    '"quoted"@x.com',
    "x@xn--bcher-kva.example",
    "x@bücher.example",
    "ü@example.com",
    "a@b",
    "a@b.123",
    "a{b}@x.org",
    "l" * 64 + "@x.com",
    "l" * 65 + "@x.com",
    "a@" + "d" * 64 + ".com",
    "a@x..com",
    "a@x.com.",
    " spaced@example.com ",
    "two@@example.com",
    "no-at-sign",
    "a@sub.example.onion",
]


@pytest.mark.parametrize("address", ADDRESSES)
def test_the_fast_address_check_agrees_with_email_validator(address: str) -> None:
    def verdict(check: object) -> str:
        try:
            return str(check(address.strip()))  # type: ignore[operator]
        except InvalidAddress:
            return "invalid"

    assert verdict(normalize) == verdict(_slow)


def test_a_short_row_with_a_two_line_name_is_joined_not_refused(conn: Conn, tmp_path: Path) -> None:
    """A quoted name on two lines in a row that leaves its last columns out (padded, as any
    short row) is a name, not a runaway quote."""
    path = tmp_path / "short.csv"
    path.write_text(
        'email,name,city,plan\nada@example.com,"Ada\nLovelace"\nbob@example.com,Bob,Paris\n',
        encoding="utf-8",
    )
    report = import_csv(conn, path, "news")
    assert (report.imported, report.rejected_count) == (2, 0)
    assert (report.lines.read, report.lines.inside) == (4, 1)
    assert members(conn, "news") == {
        "ada@example.com": ("Ada Lovelace", "confirmed"),
        "bob@example.com": ("Bob", "confirmed"),
    }
