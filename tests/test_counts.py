"""Counts are exact at every moment, and a campaign is `sent` only when nothing is left.

The test samples `status()` as fast as it can while a real worker drains 2,000 recipients.
"""

from __future__ import annotations

import time
from typing import Any

from senddock.campaigns import broadcast, status
from senddock.testing import Catcher
from support import Conn, ThreadWorker, send_campaign, unfinished

N = 2000


def job_count(conn: Conn, bid: int) -> int:
    row = conn.execute(
        "SELECT count(*) AS n FROM broadcast_jobs WHERE broadcast_id = %s", (bid,)
    ).fetchone()
    assert row is not None
    return int(row["n"])


def test_counts_move_while_sending_and_the_campaign_is_sent_only_at_the_end(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    emails = [f"user{i}@example.com" for i in range(N)]
    cid, bid = send_campaign(conn, "news", emails)
    first = status(conn, cid)
    assert (first["status"], first["total"], first["pending"], first["sent"]) == (
        "sending",
        N,
        N,
        0,
    )

    samples: list[dict[str, Any]] = []
    resent_mid_way = False
    with ThreadWorker(db_url, catcher.url, concurrency=2):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            st = status(conn, cid)
            samples.append(st)
            if st["status"] == "sent":
                break
            if not resent_mid_way and 0 < st["sent"] < N:
                # Sending the same campaign again while it drains creates nothing new.
                assert broadcast(conn, cid) == (bid, N, False)
                assert job_count(conn, bid) == N
                resent_mid_way = True
            time.sleep(0.005)
    assert samples[-1]["status"] == "sent", samples[-1]

    last_sent = 0
    for st in samples:
        unsettled = st["pending"] + st["sending"] + st["retry"]
        assert st["total"] == N
        assert st["total"] == unsettled + st["sent"] + st["failed"], st
        assert st["sent"] >= last_sent, (last_sent, st)
        last_sent = st["sent"]
        assert st["status"] in ("sending", "sent"), st
        if st["status"] == "sent":
            assert unsettled == 0, st
    mid_way = [st for st in samples if 0 < st["sent"] < N and st["status"] == "sending"]
    assert mid_way, "no sample caught the campaign part-way through"
    assert resent_mid_way

    done = samples[-1]
    assert (done["sent"], done["failed"], done["pending"], done["sending"], done["retry"]) == (
        N,
        0,
        0,
        0,
        0,
    )
    assert unfinished(conn, bid) == 0
    assert catcher.delivered_once(emails)

    # And again once it is sent: same broadcast, same jobs, nothing sent twice.
    assert broadcast(conn, cid) == (bid, N, False)
    assert job_count(conn, bid) == N
    assert conn.execute("SELECT count(*) AS n FROM broadcasts").fetchone() == {"n": 1}
    assert status(conn, cid)["status"] == "sent"
    assert catcher.delivered_once(emails)
