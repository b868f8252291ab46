"""The queue is one layer: a campaign's status follows its broadcast's, and only the queue
(senddock/queue/jobs.sql) writes a status."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from senddock.campaigns import cancel, create_campaign, status
from support import Conn, seed_list, send_campaign

PACKAGE = Path(str(resources.files("senddock")))


@pytest.mark.parametrize(
    ("broadcast_status", "campaign_status"),
    [("paused", "paused"), ("finished", "sent"), ("cancelled", "cancelled")],
)
def test_a_campaign_status_is_its_broadcasts_whoever_writes_the_broadcast(
    conn: Conn, broadcast_status: str, campaign_status: str
) -> None:
    cid, bid = send_campaign(conn, "news", ["a@example.com"])
    assert status(conn, cid)["status"] == "sending"  # the new broadcast is running
    # Any statement that moves the broadcast moves its campaign, in that statement.
    conn.execute("UPDATE broadcasts SET status = %s WHERE id = %s", (broadcast_status, bid))
    row = conn.execute("SELECT status FROM campaigns WHERE id = %s", (cid,)).fetchone()
    assert row is not None and row["status"] == campaign_status
    conn.execute("UPDATE broadcasts SET status = 'running' WHERE id = %s", (bid,))
    row = conn.execute("SELECT status FROM campaigns WHERE id = %s", (cid,)).fetchone()
    assert row is not None and row["status"] == "sending"


def test_a_draft_has_no_broadcast_and_is_cancelled_on_its_own(conn: Conn) -> None:
    seed_list(conn, "news", ["a@example.com"])
    cid = create_campaign(
        conn, name="d", list_name="news", subject="s", from_addr="n@example.org", text_body="x"
    )
    assert cancel(conn, cid) == 0
    assert status(conn, cid)["status"] == "cancelled"


# A statement that writes a job's, broadcast's or campaign's status, or creates or deletes jobs.
WRITES_STATUS = re.compile(
    r"UPDATE\s+(?:campaigns|broadcasts|broadcast_jobs)\b[^;]*?\bSET\b[^;]*?\bstatus\s*="
    r"|INSERT\s+INTO\s+(?:broadcasts|broadcast_jobs)\b"
    r"|DELETE\s+FROM\s+broadcast_jobs\b",
    re.IGNORECASE,
)


def test_only_the_queue_layer_writes_a_status() -> None:
    outside = [
        p
        for p in sorted(PACKAGE.rglob("*"))
        if p.suffix in (".py", ".sql")
        and "queue" not in p.relative_to(PACKAGE).parts
        and "migrations" not in p.parts
    ]
    writers = [str(p.relative_to(PACKAGE)) for p in outside if WRITES_STATUS.search(p.read_text())]
    assert writers == []
