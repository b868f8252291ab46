"""The engine end to end in one process: enqueue, send, count at the server."""

from __future__ import annotations

from senddock.campaigns import status
from senddock.testing import Catcher
from support import Conn, ThreadWorker, send_campaign, unfinished, wait_until


def test_a_broadcast_reaches_every_recipient_once(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    emails = [f"user{i}@example.com" for i in range(300)]
    cid, bid = send_campaign(conn, "news", emails)
    with ThreadWorker(db_url, catcher.url):
        assert wait_until(lambda: unfinished(conn, bid) == 0, 60)
    counts = catcher.count_by_rcpt()
    assert sorted(counts) == sorted(emails)
    assert set(counts.values()) == {1}
    st = status(conn, cid)
    assert (st.status, st.counts.sent, st.counts.total) == ("sent", 300, 300)
