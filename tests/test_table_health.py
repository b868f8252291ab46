"""Table health (issue 6, target 5): claims read only the claimable rows however many finished
rows the queue holds, counts read counters, and retention deletes old jobs while
`campaign status` stays exact.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from senddock.campaigns import CampaignError, retry_failed, status
from senddock.delivery import cleaner
from senddock.queue import claim_sql
from senddock.queue.counts import QUERIES as COUNTS
from senddock.testing import Catcher
from support import Conn, ThreadWorker, plan_nodes, send_campaign, wait_until

FINISHED = 100_000
CLAIMABLE = 300


def _plan(conn: Conn, sql: str, params: Any) -> list[dict[str, Any]]:
    return plan_nodes(conn, sql, params)


def _finished_queue(conn: Conn) -> int:
    """A running broadcast with FINISHED sent rows and CLAIMABLE pending ones; its id."""
    emails = [f"h{i}@health.example" for i in range(FINISHED + CLAIMABLE)]
    _, bid = send_campaign(conn, "health", emails)
    conn.execute(
        "UPDATE broadcast_jobs SET status = 'sent', attempts = 1, sent_at = now() WHERE id IN"
        " (SELECT id FROM broadcast_jobs WHERE broadcast_id = %s ORDER BY id LIMIT %s)",
        (bid, FINISHED),
    )
    conn.execute("VACUUM ANALYZE broadcast_jobs")
    return bid


def test_claim_reads_the_partial_index_of_claimable_rows_past_a_hundred_thousand_finished(
    conn: Conn,
) -> None:
    _finished_queue(conn)
    nodes = _plan(conn, claim_sql(10), {"owner": 1})
    on_jobs = [n for n in nodes if n.get("Relation Name") == "broadcast_jobs"]
    assert on_jobs, "the claim does not read broadcast_jobs"
    used = {str(n["Index Name"]) for n in on_jobs if "Index Name" in n}
    assert "broadcast_jobs_claimable" in used, (used, [n["Node Type"] for n in on_jobs])
    assert not [n for n in on_jobs if n["Node Type"] == "Seq Scan"]


def test_counts_read_the_counters_and_only_the_held_rows_of_the_queue(conn: Conn) -> None:
    """The one count (queue/counts.py) reads counter rows and, of broadcast_jobs, only the
    partial index of held rows: nothing whose size grows with the broadcast."""
    _finished_queue(conn)
    _, bid = send_campaign(conn, "small", [f"s{i}@example.com" for i in range(500)], "small")
    conn.execute("VACUUM ANALYZE broadcast_jobs")
    counters = _plan(conn, COUNTS["counters"], {"ids": [bid]})
    assert {n.get("Relation Name") for n in counters if "Relation Name" in n} == {
        "broadcast_counts"
    }
    held = _plan(conn, COUNTS["sending"], {"ids": [bid]})
    on_jobs = [n for n in held if n.get("Relation Name") == "broadcast_jobs"]
    assert [n.get("Index Name") for n in on_jobs] == ["broadcast_jobs_sending"], [
        (n["Node Type"], n.get("Index Name")) for n in on_jobs
    ]
    problem = _plan(conn, COUNTS["last_problem"], {"b": bid})
    on_jobs = [n for n in problem if n.get("Relation Name") == "broadcast_jobs"]
    assert [n.get("Index Name") for n in on_jobs] == ["broadcast_jobs_problems"]


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _clean(url: str, days: int, batches: int = 1000) -> int:
    async with await AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as a:
        return await cleaner.clean(a, days, batches)


def _sent_campaign(conn: Conn, db_url: str, catcher: Catcher, name: str, n: int) -> int:
    """A campaign sent through a real worker: n addresses, two of them bouncing."""
    emails = [f"{name}{i}@example.com" for i in range(n - 2)]
    emails += [f"bounce-{name}@example.com", f"bounce-{name}2@example.com"]
    cid, _ = send_campaign(conn, name, emails, name)
    with ThreadWorker(db_url, catcher.url, retention_days=0):
        assert wait_until(lambda: status(conn, cid).status == "sent", 60)
    return cid


def _jobs(conn: Conn, cid: int) -> int:
    row = conn.execute(
        "SELECT count(*) AS n FROM broadcast_jobs j JOIN campaigns c"
        " ON c.broadcast_id = j.broadcast_id WHERE c.id = %s",
        (cid,),
    ).fetchone()
    assert row is not None
    return int(row["n"])


def _age(conn: Conn, cid: int, days: int) -> None:
    conn.execute(
        "UPDATE broadcasts SET finished_at = now() - make_interval(days => %s)"
        " WHERE campaign_id = %s",
        (days, cid),
    )


def test_retention_deletes_old_jobs_in_batches_and_status_stays_exact(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    old = _sent_campaign(conn, db_url, catcher, "old", 40)
    recent = _sent_campaign(conn, db_url, catcher, "recent", 20)
    before_old, before_recent = status(conn, old), status(conn, recent)
    assert (before_old.counts.sent, before_old.counts.bounced, before_old.counts.total) == (
        38,
        2,
        40,
    )
    _age(conn, old, 91)
    _age(conn, recent, 89)

    assert _run(_clean(db_url, 0)) == 0, "retention 0 keeps everything"
    assert _jobs(conn, old) == 40
    # One batch of 5,000 takes all 40; the recent broadcast is untouched.
    assert _run(_clean(db_url, 90, batches=1)) == 40
    assert (_jobs(conn, old), _jobs(conn, recent)) == (0, 20)
    assert status(conn, old) == before_old
    assert status(conn, recent) == before_recent
    frozen = conn.execute(
        "SELECT final_counts, purged_at FROM broadcasts WHERE campaign_id = %s", (old,)
    ).fetchone()
    assert frozen is not None and frozen["purged_at"] is not None
    assert frozen["final_counts"]["sent"] == 38
    assert _run(_clean(db_url, 90)) == 0


def test_the_worker_runs_retention_from_its_maintenance_loop(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    cid = _sent_campaign(conn, db_url, catcher, "aged", 30)
    before = status(conn, cid)
    _age(conn, cid, 120)
    with ThreadWorker(db_url, catcher.url, retention_days=90):
        assert wait_until(lambda: _jobs(conn, cid) == 0, 30)
    assert status(conn, cid) == before


def test_a_big_enqueue_claims_through_the_claimable_index_without_waiting_for_autovacuum(
    conn: Conn,
) -> None:
    """The enqueue refreshes the statistics: fresh ones make the claim walk 10 rows, not 20,000."""
    send_campaign(conn, "fresh", [f"f{i}@fresh.example" for i in range(20_000)], "fresh")
    nodes = _plan(conn, claim_sql(10), {"owner": 1})
    picked = {str(n["Index Name"]) for n in nodes if "broadcast_jobs" in n.get("Index Name", "")}
    # The locking scan reads the partial index; the UPDATE finds each row by its primary key.
    # The suspects' partial index too: a claim also looks for one suspect (issue 18), and
    # finds it there at once, however many jobs are claimable.
    assert picked == {
        "broadcast_jobs_claimable",
        "broadcast_jobs_pkey",
        "broadcast_jobs_suspects",
    }, picked
    assert not [n for n in nodes if n.get("Node Type") == "BitmapAnd"]


def test_retry_failed_after_retention_says_the_recipients_are_gone(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    cid = _sent_campaign(conn, db_url, catcher, "gone", 10)
    conn.execute(
        "UPDATE broadcast_jobs SET status = 'failed', failure = 'exhausted'"
        " WHERE email = 'gone0@example.com'"
    )
    _age(conn, cid, 120)
    assert _run(_clean(db_url, 90)) == 10
    with pytest.raises(CampaignError, match="deleted by retention"):
        retry_failed(conn, cid)
    assert status(conn, cid).status == "sent"  # nothing reopened
