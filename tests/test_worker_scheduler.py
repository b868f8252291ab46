"""Every worker runs the scheduler: a scheduled campaign goes out with no `serve` running."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from senddock.campaigns import create_campaign, status
from senddock.testing import Catcher
from support import Conn, ThreadWorker, seed_list, wait_until


def test_a_due_scheduled_campaign_is_sent_by_two_workers_exactly_once(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    emails = [f"sched{i}@example.com" for i in range(50)]
    seed_list(conn, "news", emails)
    cid = create_campaign(
        conn,
        name="scheduled",
        list_name="news",
        subject="Hi",
        from_addr="news@example.org",
        text_body="Hello {{ subscriber.name }}\n",
        send_at=datetime.now(UTC) + timedelta(seconds=1),
    )
    assert status(conn, cid).status == "draft"
    with (
        ThreadWorker(db_url, catcher.url, lease_seconds=3),
        ThreadWorker(db_url, catcher.url, lease_seconds=3),
    ):
        assert wait_until(lambda: status(conn, cid).status == "sent", 30)
    assert sorted(catcher.count_by_rcpt()) == sorted(emails)
    assert set(catcher.count_by_rcpt().values()) == {1}
    row = conn.execute("SELECT count(*) AS n FROM broadcasts WHERE campaign_id = %s", (cid,))
    assert (one := row.fetchone()) is not None and one["n"] == 1
