"""A campaign can target several lists; an address on more than one gets one message."""

from __future__ import annotations

from senddock.campaigns import broadcast, create_campaign, status
from senddock.testing import Catcher
from support import Conn, ThreadWorker, seed_list, unfinished, wait_until


def test_a_campaign_to_two_overlapping_lists_sends_each_address_once(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    seed_list(conn, "news", ["a@example.com", "b@example.com", "Both@example.com"])
    seed_list(conn, "events", ["both@example.com", "c@example.com"])
    seed_list(conn, "other", ["not-targeted@example.com"])
    cid = create_campaign(
        conn,
        name="two lists",
        list_name=["news", "events"],
        subject="Hi",
        from_addr="news@example.org",
        text_body="Hello\n",
    )
    bid, total, created = broadcast(conn, cid)
    assert (total, created) == (4, True)
    with ThreadWorker(db_url, catcher.url):
        assert wait_until(lambda: unfinished(conn, bid) == 0, 30)
    counts = catcher.count_by_rcpt()
    assert sorted(counts) == ["a@example.com", "b@example.com", "both@example.com", "c@example.com"]
    assert set(counts.values()) == {1}
    assert status(conn, cid).status == "sent"


def test_create_with_an_unknown_list_among_several_stores_nothing(conn: Conn) -> None:
    seed_list(conn, "news", ["a@example.com"])
    try:
        create_campaign(
            conn,
            name="x",
            list_name=["news", "nope"],
            subject="Hi",
            from_addr="news@example.org",
            text_body="Hello\n",
        )
    except LookupError as exc:
        assert "nope" in str(exc)
    else:
        raise AssertionError("an unknown list was accepted")
    row = conn.execute("SELECT count(*) AS n FROM campaigns").fetchone()
    assert row is not None and row["n"] == 0
