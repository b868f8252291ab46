"""Importing listmonk's subscriber export (issue 22.6): its blocklisted rows are suppressed and
never sent to, everyone else is, and the attributes and sign-up times carry over."""

from __future__ import annotations

from pathlib import Path

from senddock.campaigns import broadcast
from senddock.testing import Catcher
from support import (
    Conn,
    ThreadWorker,
    new_campaign,
    senddock,
    unfinished,
    wait_until,
    worker_env,
)

EXPORT = Path(__file__).parent / "data" / "listmonk-subscribers.csv"
SENDABLE = {"zoë@bücher.example", "ada@example.com", "grace@example.com"}


def test_a_listmonk_export_imports_and_its_blocklisted_rows_are_never_sent_to(
    db_url: str, conn: Conn, catcher: Catcher
) -> None:
    env = worker_env(db_url, catcher.url)
    done = senddock(env, "subscribers", "import", str(EXPORT), "--list", "news")
    assert done.returncode == 0, done.stderr
    assert "imported 5 rows" in done.stdout
    assert "2 blocklisted in listmonk and suppressed" in done.stdout

    people = {
        str(r["email"]).lower(): r
        for r in conn.execute(
            "SELECT email, name, attributes, created_at FROM subscribers"
        ).fetchall()
    }
    assert len(people) == 5
    zoe = people["zoë@bücher.example"]
    assert zoe["name"] == "Zoë Bücher"
    assert zoe["attributes"] == {
        "city": "Zürich",
        "note": 'says "hi, there", often',
        "plan": "pro",
        "listmonk_uuid": "3f1c2a9e-7b4d-4e21-9a0c-5d8e6f7a1b2c",
    }
    assert zoe["created_at"].isoformat() == "2021-06-14T09:30:00.123456+00:00"
    assert people["ada@example.com"]["attributes"]["tags"] == ["math", "engines"]
    assert "status" not in people["grace@example.com"]["attributes"]

    suppressed = conn.execute(
        "SELECT lower(email) AS email, reason, detail FROM suppressions ORDER BY 1"
    ).fetchall()
    blocked = sorted(e for e in people if e not in SENDABLE)
    assert [r["email"] for r in suppressed] == blocked
    assert {(r["reason"], r["detail"]) for r in suppressed} == {("manual", "listmonk: blocklisted")}

    # Importing the file again changes nothing: still suppressed, nobody duplicated.
    again = senddock(env, "subscribers", "import", str(EXPORT), "--list", "news")
    assert again.returncode == 0, again.stderr
    assert conn.execute("SELECT count(*) AS n FROM suppressions").fetchone() == {"n": 2}

    cid = new_campaign(conn, "news", "from listmonk")
    bid, total, _ = broadcast(conn, cid)
    assert total == 3
    with ThreadWorker(db_url, catcher.url):
        assert catcher.wait_for(3, timeout=60)
        assert wait_until(lambda: unfinished(conn, bid) == 0)
    # What the relay saw: IDNA domains go as A-labels (README, "The guarantee").
    got = {r.lower() for r in catcher.count_by_rcpt()}
    assert got == {"zoë@xn--bcher-kva.example", "ada@example.com", "grace@example.com"}
    assert all(n == 1 for n in catcher.count_by_rcpt().values())
