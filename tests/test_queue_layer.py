"""The queue is one layer: a campaign's status follows its broadcast's, and only the queue
(senddock/queue/jobs.sql) writes a status."""

from __future__ import annotations

import logging
import re
import sys
from importlib import resources
from pathlib import Path

import pytest

from senddock.campaigns import broadcast, cancel, create_campaign, status
from senddock.queue import enqueue_all, enqueue_chunk
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
    assert status(conn, cid).status == "sending"  # the new broadcast is running
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
    assert status(conn, cid).status == "cancelled"


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


def test_a_chunk_over_jobs_already_there_enqueues_only_the_missing_ones(
    conn: Conn, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """ENQUEUE_SKIPPING (queue/jobs.py): a chunk whose id range holds jobs already (a cursor
    behind its jobs: chunks never overlap, but the unique key is the last word) inserts the
    missing ones once, and the broadcast's total counts only those. Fails (UniqueViolation)
    with the ON CONFLICT removed from ENQUEUE_SKIPPING."""
    emails = [f"s{i:02}@example.com" for i in range(30)]
    seed_list(conn, "news", emails)
    cid = create_campaign(
        conn, name="c", list_name="news", subject="s", from_addr="n@example.org", text_body="x"
    )
    # A first chunk of 10 (the package re-exports the function under the module's name).
    monkeypatch.setattr(sys.modules["senddock.campaigns.broadcast"], "FIRST_CHUNK", 10)
    bid, so_far, created = broadcast(conn, cid)
    assert (so_far, created) == (10, True)
    # The cursor falls behind the 10 jobs it covered: the next chunk starts over them.
    rewound = conn.execute(
        "UPDATE broadcast_enqueues SET after_id = 0 WHERE broadcast_id = %s", (bid,)
    ).rowcount
    assert rewound == 1
    with caplog.at_level(logging.WARNING, logger="senddock.enqueue"):
        chunk = enqueue_chunk(conn, bid, 15)
    assert chunk is not None and chunk.jobs == 5  # 15 in range, 10 of them there already
    assert "exist already" in caplog.text  # it went the ENQUEUE_SKIPPING way
    assert enqueue_all(conn, bid, 15) == 15
    row = conn.execute(
        "SELECT count(*) AS n, count(DISTINCT subscriber_id) AS people,"
        " (SELECT total FROM broadcasts WHERE id = %s) AS total,"
        " (SELECT count(*) FROM broadcast_enqueues WHERE broadcast_id = %s) AS cursors"
        " FROM broadcast_jobs WHERE broadcast_id = %s",
        (bid, bid, bid),
    ).fetchone()
    assert row is not None
    assert (row["n"], row["people"], row["total"], row["cursors"]) == (30, 30, 30, 0)
    assert status(conn, cid).counts.total == 30
