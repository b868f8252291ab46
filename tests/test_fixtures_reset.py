"""The reset before each test (tests/conftest.py, Emptier) leaves what the full
`TRUNCATE {TABLES} RESTART IDENTITY CASCADE` left: every table it reaches empty, every id
starting again at 1, while it truncates only the tables a test wrote to."""

from __future__ import annotations

from conftest import TABLES, Emptier
from support import Conn, send_campaign

# Reached through a foreign key to a table TABLES names: TRUNCATE ... CASCADE empties them too.
CASCADED = ("campaign_lists", "broadcast_enqueues")


def rows(conn: Conn, table: str) -> int:
    row = conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()  # noqa: S608 (ours)
    assert row is not None
    return int(row["n"])


def test_the_reset_empties_every_table_and_restarts_every_id(conn: Conn, emptier: Emptier) -> None:
    send_campaign(conn, "news", ["ada@example.org", "bob@example.org"])
    # An id taken with no row left behind: its table stays 0 bytes, its sequence moved on.
    conn.execute("SELECT nextval(pg_get_serial_sequence('segments', 'id'))")
    tables = [t.strip() for t in TABLES.split(",")] + list(CASCADED)
    assert any(rows(conn, t) for t in tables)

    emptier.empty(conn)

    assert {t: rows(conn, t) for t in tables} == dict.fromkeys(tables, 0)
    cid, bid = send_campaign(conn, "news", ["cy@example.org"])
    assert (cid, bid) == (1, 1)
    got = conn.execute(
        "SELECT min(id) AS job, min(subscriber_id) AS s FROM broadcast_jobs"
    ).fetchone()
    assert got is not None and (got["job"], got["s"]) == (1, 1)
    assert conn.execute("SELECT id FROM lists").fetchall() == [{"id": 1}]
    row = conn.execute("SELECT nextval(pg_get_serial_sequence('segments', 'id')) AS id").fetchone()
    assert row is not None and row["id"] == 1
