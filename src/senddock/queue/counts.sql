-- The one count of a broadcast's jobs (queue/counts.py). Counters are kept by the triggers of
-- migration 0010 in the same transactions as the transitions.
--
-- Relies on these triggers and functions (each in db/schema.sql; tests/test_schema_file.py
-- checks that every one named here exists there):
--   trigger broadcast_jobs_count_inserts (0010): the counters of enqueued jobs.
--   trigger broadcast_jobs_count_updates (0010): the counters of every transition.
--   function senddock_count_state (0010): the state a counter row is kept under.
--   function senddock_unfinished_weight (0026): a state's weight in "unfinished".

-- name: counters
-- Invariant 8: a broadcast's counted states (total, retry, sent, failed by reason, cancelled,
-- and 'later:<kind>': reports after the 250, queue/bounces.sql), summed over the slots the
-- writers shard them into: at most 16 rows per state, whatever the size of the broadcast, and
-- untouched by retention, which deletes jobs but no counter. Each state comes with its weight
-- in "unfinished" (senddock_unfinished_weight, migration 0026: the one definition that
-- `finish` reads too), so Counts.unfinished is never worked out by other arithmetic.
SELECT broadcast_id, state, sum(n)::bigint AS n, senddock_unfinished_weight(state) AS weight
FROM broadcast_counts
WHERE broadcast_id = ANY(%(ids)s::bigint[])
GROUP BY broadcast_id, state

-- name: sending
-- Invariant 8: jobs held by workers right now, which no counter keeps (a claim would lock the
-- counter row). The fence (OFFSET 0) keeps the held rows' own partial index
-- (broadcast_jobs_sending: only rows in sending, a few per worker) as the only way in; with the
-- broadcast's id in the same WHERE the planner may walk the broadcast's entries of the unique
-- key instead, which is the whole broadcast.
SELECT held.broadcast_id, count(*)::bigint AS n
FROM (SELECT broadcast_id FROM broadcast_jobs WHERE status = 'sending' OFFSET 0) held
WHERE held.broadcast_id = ANY(%(ids)s::bigint[])
GROUP BY held.broadcast_id

-- name: all_counters
-- Invariant 8: every broadcast's counted states together (for /metrics): the counter table
-- holds a few rows per broadcast, not one per job.
SELECT state, sum(n)::bigint AS n, senddock_unfinished_weight(state) AS weight
FROM broadcast_counts GROUP BY state

-- name: all_sending
-- Invariant 8: every job held by a worker (for /metrics), through the held rows' partial index.
SELECT count(*)::bigint AS n FROM broadcast_jobs WHERE status = 'sending'

-- name: last_problem
-- What `campaign status` shows as a broadcast's latest problem: the newest retry or failed job
-- with a reply, one entry of the partial index broadcast_jobs_problems (migration 0010), so
-- its cost does not grow with the broadcast either.
SELECT email, status, last_stage, last_code, last_enhanced, last_reply FROM broadcast_jobs
WHERE broadcast_id = %(b)s AND status IN ('retry', 'failed') AND last_reply IS NOT NULL
ORDER BY updated_at DESC LIMIT 1

-- name: bounced_at_send
-- Issue 35: each sent campaign's recipients refused at RCPT as bounces (failed: bounced), for
-- `bounces list`, which shows reports that came later and must not say "none" over these. From
-- the counters (a few rows per broadcast), so it survives retention.
SELECT c.id AS campaign_id, sum(k.n)::bigint AS n
FROM campaigns c JOIN broadcast_counts k ON k.broadcast_id = c.broadcast_id
WHERE k.state = 'failed:bounced' AND (%(c)s::bigint IS NULL OR c.id = %(c)s)
GROUP BY c.id HAVING sum(k.n) > 0
ORDER BY c.id
