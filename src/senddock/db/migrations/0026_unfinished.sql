-- Issue 33: one definition of "unfinished" (invariant 8). Until 0025 `finish` (queue/jobs.sql)
-- worked it out from broadcast_counts by subtracting every state but 'total' and 'retry', and
-- the 'later:<kind>' counters of reports after the 250 (0015) were subtracted as if they were
-- jobs: a bounce that landed mid-send left its campaign `sending` for good, or finished it
-- while as many jobs as bounces were still pending (never claimed again: a silent drop).
--
-- Now a counter's weight in "unfinished" is named here, once, by a list of what counts: the
-- total counts +1, and each job in a final state (sent, failed for any reason, cancelled) -1.
-- Every other counter (retry, unconfirmed: jobs left unfinished; 'later:<kind>': reports about
-- jobs already counted; any counter added later) weighs 0. So a new kind of counter can keep a
-- broadcast from finishing until it is named here, never finish one early.
CREATE FUNCTION senddock_unfinished_weight(state text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN state = 'total' THEN 1
                WHEN state IN ('sent', 'cancelled') OR state LIKE 'failed:%' THEN -1
                ELSE 0 END
$$;

-- A broadcast's unfinished jobs (pending, sending, retry and unconfirmed): what `finish` waits
-- for and what queue/counts.py reads. A few counter rows per broadcast, whatever its size.
CREATE FUNCTION senddock_unfinished(broadcast bigint) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(sum(k.n * senddock_unfinished_weight(k.state)), 0)::bigint
    FROM broadcast_counts k WHERE k.broadcast_id = broadcast
$$;

-- Invariant 5's clock, once: how long ago a worker's heartbeat was, on the database clock,
-- counted from the later of its last beat and the server's start (a Postgres restart gives
-- every worker a full lease to come back). The rescuer buries on it (delivery/rescuer.sql), and
-- `senddock workers`, the workers page and `campaign send`'s warning judge "live" on it, so no
-- surface calls a worker live after its peers may have buried it (issue 33).
CREATE FUNCTION senddock_heartbeat_age(heartbeat timestamptz) RETURNS double precision
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT extract(epoch FROM now() - greatest(heartbeat, pg_postmaster_start_time()))::float8
$$;
