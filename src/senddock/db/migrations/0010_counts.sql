-- 0010: one count (issue 20, item 3). Each broadcast's counts are counters kept in the same
-- transactions as its job transitions, by statement-level triggers, so that every surface
-- (campaign status, the API, the dashboard, /metrics) reads the same numbers at a cost that
-- does not grow with the broadcast, and the numbers outlive retention (invariant 8).
-- The reader is senddock/queue/counts.py.

-- `state` is a job status, or 'failed:' and its failure reason ('failed:' alone when there is
-- none), or 'total' (every job ever inserted). Pending and sending are not counted here: a
-- claim moves pending to sending, and several workers claim from one broadcast at once; were
-- either counted, every claim would lock the broadcast's counter row until its commit.
-- Sending is read from the small partial index of held rows (broadcast_jobs_sending) and
-- pending is what is left of the total.
-- `slot` shards the counters by the writing session (pg_backend_pid() % 16): two recorders
-- (group commit, one per worker process) seldom wait on each other's counter rows. A reader
-- sums at most 16 rows per state.
CREATE TABLE broadcast_counts (
    broadcast_id bigint NOT NULL,
    state        text NOT NULL,
    slot         smallint NOT NULL,
    n            bigint NOT NULL,
    PRIMARY KEY (broadcast_id, state, slot)
);

-- The counted state of a job: NULL for the states that are not counted (pending, sending).
CREATE FUNCTION senddock_count_state(status text, failure text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN status IN ('pending', 'sending') THEN NULL
                WHEN status = 'failed' THEN 'failed:' || coalesce(failure, '')
                ELSE status END
$$;

-- Rows are upserted in key order, so two statements that touch the same counters lock them in
-- the same order (no deadlock between them). Nets to nothing (a resume's run_at update, a
-- claim of pending jobs) write nothing.
CREATE FUNCTION senddock_count_inserted_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO broadcast_counts AS c (broadcast_id, state, slot, n)
    SELECT d.broadcast_id, d.state, pg_backend_pid() % 16, sum(d.n)
    FROM (SELECT broadcast_id, 'total' AS state, 1 AS n FROM new_jobs
          UNION ALL
          SELECT broadcast_id, senddock_count_state(status, failure), 1 FROM new_jobs
          WHERE status NOT IN ('pending', 'sending')) d
    GROUP BY d.broadcast_id, d.state
    ORDER BY d.broadcast_id, d.state
    ON CONFLICT (broadcast_id, state, slot) DO UPDATE SET n = c.n + excluded.n;
    RETURN NULL;
END $$;

-- A claim of pending jobs (pending -> sending, the most frequent statement) has no counted state
-- on either side: it returns before the grouped upsert (which cost it about as much again as
-- the trigger's own firing, measured on a 200,000-job broadcast).
CREATE FUNCTION senddock_count_updated_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM new_jobs WHERE status NOT IN ('pending', 'sending'))
       AND NOT EXISTS (SELECT 1 FROM old_jobs WHERE status NOT IN ('pending', 'sending')) THEN
        RETURN NULL;
    END IF;
    INSERT INTO broadcast_counts AS c (broadcast_id, state, slot, n)
    SELECT d.broadcast_id, d.state, pg_backend_pid() % 16, sum(d.n)
    FROM (SELECT broadcast_id, senddock_count_state(status, failure) AS state, 1 AS n
          FROM new_jobs WHERE status NOT IN ('pending', 'sending')
          UNION ALL
          SELECT broadcast_id, senddock_count_state(status, failure), -1 FROM old_jobs
          WHERE status NOT IN ('pending', 'sending')) d
    GROUP BY d.broadcast_id, d.state
    HAVING sum(d.n) <> 0
    ORDER BY d.broadcast_id, d.state
    ON CONFLICT (broadcast_id, state, slot) DO UPDATE SET n = c.n + excluded.n;
    RETURN NULL;
END $$;

-- No trigger on DELETE: retention deletes the jobs of an ended broadcast and its counts stay
-- as they were (they replace the counts the cleaner used to freeze).
CREATE TRIGGER broadcast_jobs_count_inserts AFTER INSERT ON broadcast_jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION senddock_count_inserted_jobs();
CREATE TRIGGER broadcast_jobs_count_updates AFTER UPDATE ON broadcast_jobs
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION senddock_count_updated_jobs();

-- Backfill: the jobs of every broadcast not yet purged, and the frozen counts of the purged ones
-- (whose jobs may be partly deleted already).
INSERT INTO broadcast_counts (broadcast_id, state, slot, n)
SELECT j.broadcast_id, s.state, 0, count(*)
FROM broadcast_jobs j JOIN broadcasts b ON b.id = j.broadcast_id AND b.final_counts IS NULL
CROSS JOIN LATERAL (VALUES ('total'), (senddock_count_state(j.status, j.failure))) s (state)
WHERE s.state IS NOT NULL
GROUP BY j.broadcast_id, s.state;

INSERT INTO broadcast_counts (broadcast_id, state, slot, n)
SELECT f.id, f.state, 0, f.n
FROM (
    SELECT b.id, k.state, k.n
    FROM broadcasts b, LATERAL (VALUES
        ('total', (b.final_counts->>'total')::bigint),
        ('retry', (b.final_counts->>'retry')::bigint),
        ('sent', (b.final_counts->>'sent')::bigint),
        ('cancelled', (b.final_counts->>'cancelled')::bigint),
        ('failed:bounced', (b.final_counts->>'bounced')::bigint),
        ('failed:suppressed', (b.final_counts->>'suppressed')::bigint),
        ('failed:exhausted', (b.final_counts->>'exhausted')::bigint),
        ('failed:rejected', (b.final_counts->>'rejected')::bigint),
        ('failed:', (b.final_counts->>'failed')::bigint
                    - coalesce((b.final_counts->>'bounced')::bigint, 0)
                    - coalesce((b.final_counts->>'suppressed')::bigint, 0)
                    - coalesce((b.final_counts->>'exhausted')::bigint, 0)
                    - coalesce((b.final_counts->>'rejected')::bigint, 0))
    ) k (state, n)
    WHERE b.final_counts IS NOT NULL
) f
WHERE f.n IS NOT NULL AND f.n <> 0;

-- `campaign status` shows a broadcast's latest problem: with this index that is one index entry
-- however big the broadcast, not a walk over all its jobs. Only retry and failed rows with a
-- reply are in it, so a sent message does not write it.
CREATE INDEX broadcast_jobs_problems ON broadcast_jobs (broadcast_id, updated_at)
    WHERE status IN ('retry', 'failed') AND last_reply IS NOT NULL;
