"""Table health (issue 6, target 5): the claim query reads the partial index of claimable rows.

With many finished rows and a few claimable ones, the planner must reach the claimable rows
through `broadcast_jobs_claimable` (a partial index on run_at WHERE status IN pending/retry),
not by scanning the whole table: that is what keeps claims as fast on a table of ten million
finished rows as on an empty one.
"""

from __future__ import annotations

from typing import Any

from senddock.campaigns import broadcast
from senddock.campaigns.broadcast import enqueue_all
from senddock.delivery.outcome import Reply, Transition
from senddock.queue import QUERIES, Job, Outcome, claim_sql, outcome_rows
from support import Conn, new_campaign, plan_nodes, seed_list, send_campaign

RECORD_MANY = QUERIES["record_many"]

FINISHED = 50_000
PENDING = 500
CLAIMED = 10
CLAIM = claim_sql(CLAIMED)
CLAIM_PARAMS = {"owner": 1}


def _explain(conn: Conn) -> list[dict[str, Any]]:
    return plan_nodes(conn, CLAIM, CLAIM_PARAMS)


def _seed_mixed_queue(conn: Conn) -> int:
    """One running broadcast: FINISHED sent or failed rows and PENDING claimable ones."""
    emails = [f"user{i}@plan.example" for i in range(FINISHED + PENDING)]
    seed_list(conn, "plan", emails)
    cid = new_campaign(conn, "plan")
    bid, _, _ = broadcast(conn, cid)
    enqueue_all(conn, bid)  # what workers do in the background
    total = broadcast(conn, cid)[1]
    assert total == FINISHED + PENDING
    conn.execute(
        "UPDATE broadcast_jobs SET status = CASE WHEN id %% 50 = 0 THEN 'failed' ELSE 'sent' END,"
        " failure = CASE WHEN id %% 50 = 0 THEN 'rejected' END,"
        " attempts = 1, sent_at = now() WHERE id IN"
        " (SELECT id FROM broadcast_jobs WHERE broadcast_id = %s ORDER BY id LIMIT %s)",
        (bid, FINISHED),
    )
    # A few of the claimable ones wait in retry, as they do mid-broadcast.
    conn.execute(
        "UPDATE broadcast_jobs SET status = 'retry', attempts = 1 WHERE id IN"
        " (SELECT id FROM broadcast_jobs WHERE status = 'pending' ORDER BY id LIMIT 50)"
    )
    conn.execute("ANALYZE")
    return bid


def test_claim_uses_the_partial_index_of_claimable_rows(conn: Conn) -> None:
    bid = _seed_mixed_queue(conn)
    counts = conn.execute(
        "SELECT count(*) FILTER (WHERE status IN ('pending', 'retry')) AS claimable,"
        " count(*) FILTER (WHERE status IN ('sent', 'failed')) AS finished"
        " FROM broadcast_jobs WHERE broadcast_id = %s",
        (bid,),
    ).fetchone()
    assert counts == {"claimable": PENDING, "finished": FINISHED}

    nodes = _explain(conn)
    # (An `unconfirmed` outcome looks up its relay through broadcast_jobs_next_dot, a subplan
    # no other outcome runs.)
    on_jobs = [
        n
        for n in nodes
        if n.get("Relation Name") == "broadcast_jobs"
        and n.get("Index Name") != "broadcast_jobs_next_dot"
    ]
    assert on_jobs, "the plan does not read broadcast_jobs at all"
    indexes = {str(n["Index Name"]) for n in nodes if "Index Name" in n}
    assert "broadcast_jobs_claimable" in indexes, (
        f"claim plan does not use broadcast_jobs_claimable; indexes used: {sorted(indexes)}; "
        f"scans of broadcast_jobs: {[n['Node Type'] for n in on_jobs]}"
    )
    # No node reads every row of the job table to find the claimable ones.
    full_scans = [n for n in on_jobs if n["Node Type"] == "Seq Scan"]
    assert not full_scans, f"claim plan scans broadcast_jobs sequentially: {full_scans}"


def test_claim_on_the_mixed_queue_takes_only_claimable_rows(conn: Conn) -> None:
    """The EXPLAINed statement is the real one: run it and it claims due jobs, oldest first."""
    bid = _seed_mixed_queue(conn)
    with conn.transaction():
        rows = conn.execute(CLAIM, CLAIM_PARAMS).fetchall()
    assert len(rows) == CLAIMED
    claimed = [int(r["id"]) for r in rows]
    states = conn.execute(
        "SELECT status, count(*) AS n FROM broadcast_jobs WHERE broadcast_id = %s"
        " GROUP BY status ORDER BY status",
        (bid,),
    ).fetchall()
    by_status = {str(r["status"]): int(r["n"]) for r in states}
    assert by_status.get("sending") == CLAIMED
    assert by_status.get("pending", 0) + by_status.get("retry", 0) == PENDING - CLAIMED
    held = conn.execute(
        "SELECT count(*) AS n FROM broadcast_jobs WHERE id = ANY(%s) AND status = 'sending'"
        " AND owner = %s",
        (claimed, CLAIM_PARAMS["owner"]),
    ).fetchone()
    assert held == {"n": CLAIMED}


def test_outcomes_find_their_rows_by_primary_key_however_many_claims_are_held(conn: Conn) -> None:
    """A group of outcomes reaches its rows through the primary key. Fenced by constants (owner =
    1, status = 'sending'), the planner read every row the owner held through
    broadcast_jobs_sending and hashed them all, for each group: the cost grew with the claims
    held (250 for five senders claiming 50 each), not with the group."""
    _seed_mixed_queue(conn)  # analyzed with nothing in `sending`, as a broadcast starts
    with conn.transaction():
        held = [Job(**r) for r in conn.execute(claim_sql(250), CLAIM_PARAMS).fetchall()]
    assert len(held) == 250
    sent = Reply("data", 250, "2.0.0 Ok")
    group = [Outcome(job, Transition("sent"), sent) for job in held[:5]]
    params = {"outcomes": outcome_rows(CLAIM_PARAMS["owner"], group)}

    nodes = plan_nodes(conn, RECORD_MANY, params)
    # (An `unconfirmed` outcome looks up its relay through broadcast_jobs_next_dot, a subplan
    # no other outcome runs.)
    on_jobs = [
        n
        for n in nodes
        if n.get("Relation Name") == "broadcast_jobs"
        and n.get("Index Name") != "broadcast_jobs_next_dot"
    ]
    scans = [n for n in on_jobs if "Scan" in n["Node Type"]]
    # Every scan is by key: the rows', and the carried mark's own fence (`held`, issue 33).
    assert scans and {(n["Node Type"], n.get("Index Name")) for n in scans} == {
        ("Index Scan", "broadcast_jobs_pkey")
    }

    with conn.transaction():
        written = {int(r["id"]) for r in conn.execute(RECORD_MANY, params).fetchall()}
    assert written == {o.job.id for o in group}
    states = conn.execute(
        "SELECT status, count(*) AS n FROM broadcast_jobs WHERE id = ANY(%s) GROUP BY status",
        ([job.id for job in held],),
    ).fetchall()
    assert {str(r["status"]): int(r["n"]) for r in states} == {"sent": 5, "sending": 245}


def test_claims_keep_one_plan_on_a_big_queue(conn: Conn) -> None:
    """With 120,000 claimable jobs, every claim on a connection runs the one plan Postgres keeps
    for it. With the limit as a parameter (`LIMIT $1`) the generic plan must guess the limit (a
    tenth of the rows), always looks dearer than a custom plan, and each claim was planned anew:
    about a millisecond, a fifth of Postgres's cost per claimed job (bench/queue_cost.py)."""
    send_campaign(conn, "big", [f"b{i}@big.example" for i in range(120_000)], "big")
    conn.execute("ANALYZE broadcast_jobs")
    # psycopg prepares a statement after 5 runs; Postgres plans the first 5 prepared runs anew
    # anyway, then weighs its generic plan against them.
    claims = 20
    for _ in range(claims):
        with conn.transaction():
            assert len(conn.execute(claim_sql(50), CLAIM_PARAMS).fetchall()) == 50
    kept = conn.execute(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
        " WHERE statement LIKE '%%FOR UPDATE OF j SKIP LOCKED%%'"
    ).fetchall()
    assert len(kept) == 1, kept
    assert kept[0]["generic_plans"] >= claims - 10, kept
