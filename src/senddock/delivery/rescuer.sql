-- Liveness and rescue (delivery/rescuer.py): who is alive, who is dead, and what the dead held.
-- Invariant 5: rescue only the dead, judged on the database's clock. The rescue itself (jobs
-- back to retry as suspects) is the queue's (queue/jobs.sql, rescue).

-- name: register
-- A worker process's row: who it is, in a form a peer on the same host can check (hostname,
-- boot id, pid and the pid's start time) and where it keeps its dot log (0033). Its heartbeat
-- starts at now(), the database clock.
INSERT INTO workers (host, boot_id, pid, pid_started, concurrency, dot_log)
VALUES (%(host)s, %(boot_id)s, %(pid)s, %(pid_started)s, %(concurrency)s, %(dot_log)s)
RETURNING id

-- name: heartbeat
-- Invariant 5: the heartbeat is the database's clock, not the worker's. No row returned: this
-- worker was declared dead, and must drop every claim it holds without sending.
UPDATE workers SET heartbeat_at = now() WHERE id = %(id)s RETURNING id

-- name: lock
-- The worker's session advisory lock, held by its heartbeat connection for as long as it
-- lives: a peer on the same host that finds it free knows the process (or its connection) is
-- gone.
SELECT pg_advisory_lock(%(cls)s, %(id)s::int)

-- name: stopping
-- A worker on its way out: no longer counted live (campaigns/workers.sql, live).
UPDATE workers SET stopping = true WHERE id = %(id)s

-- name: deregister
-- A clean exit: the row goes, with no death written down.
DELETE FROM workers WHERE id = %(id)s

-- name: peers
-- Peers as the database sees them: heartbeat age on the database clock (from the later of the
-- heartbeat and the server's start: a Postgres restart gives every worker a full lease to come
-- back) and whether the peer's heartbeat connection holds its lock. Worker ids repeat across
-- databases on one server: only the locks in ours count.
SELECT w.id, w.host, w.boot_id, w.pid, w.pid_started,
       senddock_heartbeat_age(w.heartbeat_at) AS age,
       EXISTS (SELECT 1 FROM pg_locks l
               WHERE l.locktype = 'advisory' AND l.classid = %(cls)s AND l.objsubid = 2
                 AND l.objid::bigint = w.id AND l.granted
                 AND l.database = (SELECT oid FROM pg_database
                                   WHERE datname = current_database())) AS locked
FROM workers w WHERE w.id <> %(me)s

-- name: unknown_owners
-- Owners of `sending` jobs that have no row at all (their row was removed as dead): their jobs
-- are rescued with those of the workers buried now.
SELECT DISTINCT j.owner AS id FROM broadcast_jobs j
WHERE j.status = 'sending' AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.id = j.owner)

-- name: bury
-- Declare dead, and write down each death with what it held (worker_deaths: `campaign status`,
-- the dashboard and /metrics show them); each with where it kept its dot log, which the caller
-- reads if the worker ran on its host (delivery/dotlog.py). For a lease lapse the age is
-- checked again in the same statement, so a heartbeat that landed since the look keeps the
-- worker alive. The reason is the one its supervisor or its own last words left
-- (`exit_reason`), else how it was found dead.
WITH buried AS (
    DELETE FROM workers w
    WHERE w.id = ANY(%(known_dead)s::bigint[])
       OR (w.id = ANY(%(lapsed)s::bigint[])
           AND senddock_heartbeat_age(w.heartbeat_at) > %(lease)s)
    RETURNING w.id, w.host, w.boot_id, w.pid, w.started_at, w.heartbeat_at, w.exit_reason,
              w.dot_log
), held AS (
    SELECT j.owner, count(*) AS n, array_agg(DISTINCT j.broadcast_id) AS broadcast_ids
    FROM broadcast_jobs j
    WHERE j.status = 'sending' AND j.owner IN (SELECT id FROM buried)
    GROUP BY j.owner
), noted AS (
    INSERT INTO worker_deaths
        (worker_id, host, pid, started_at, last_heartbeat, reason, jobs_held, broadcast_ids)
    SELECT b.id, b.host, b.pid, b.started_at, b.heartbeat_at,
           coalesce(b.exit_reason,
                    CASE WHEN b.id = ANY(%(known_dead)s::bigint[])
                         THEN 'process gone (no exit status known: SIGKILL, OOM or a crash)'
                         ELSE 'no heartbeat for '
                              || round(extract(epoch FROM now() - b.heartbeat_at))::text || ' s'
                    END),
           coalesce(h.n, 0), coalesce(h.broadcast_ids, '{}')
    FROM buried b LEFT JOIN held h ON h.owner = b.id
)
SELECT id, host, boot_id, pid, dot_log FROM buried

-- name: last_words
-- A worker that stops on an error it cannot outlast says why before it deregisters: its row
-- goes and its death is written down with what it held, in one statement.
WITH gone AS (
    DELETE FROM workers w WHERE w.id = %(id)s
    RETURNING w.id, w.host, w.pid, w.started_at, w.heartbeat_at
)
INSERT INTO worker_deaths
    (worker_id, host, pid, started_at, last_heartbeat, reason, jobs_held, broadcast_ids)
SELECT g.id, g.host, g.pid, g.started_at, g.heartbeat_at, %(reason)s,
       (SELECT count(*) FROM broadcast_jobs j WHERE j.owner = g.id AND j.status = 'sending'),
       coalesce((SELECT array_agg(DISTINCT j.broadcast_id) FROM broadcast_jobs j
                 WHERE j.owner = g.id AND j.status = 'sending'), '{}')
FROM gone g

-- name: exit_reason
-- The supervisor's word on a child that exited: on its row if it is still there, else on the
-- death its peer wrote down a moment ago. `noted` 0: neither was there for this statement (a
-- peer's burial was committing as it began: its death is visible to the next statement).
WITH live AS (
    UPDATE workers SET exit_reason = %(reason)s
    WHERE host = %(host)s AND pid = %(pid)s AND pid_started = %(pid_started)s
    RETURNING id
), dead AS (
    UPDATE worker_deaths d SET reason = %(reason)s
    WHERE NOT EXISTS (SELECT 1 FROM live) AND d.id = (
        SELECT id FROM worker_deaths
        WHERE host = %(host)s AND pid = %(pid)s AND found_at > now() - interval '10 minutes'
        ORDER BY found_at DESC LIMIT 1)
    RETURNING d.id
)
SELECT (SELECT count(*) FROM live) + (SELECT count(*) FROM dead) AS noted

-- name: list
-- Registered workers with heartbeat age (database clock, senddock_heartbeat_age: the one the
-- rescuer buries on), their health and the jobs each holds. `dead`: silent past the lease, so
-- any live peer buries it and rescues what it holds at its next look; a row stays until then.
SELECT w.id, w.host, w.pid, w.concurrency, w.started_at, w.heartbeat_at, w.stopping,
       a.age AS heartbeat_age,
       CASE WHEN a.age > %(lease)s THEN 'dead'
            WHEN w.stopping THEN 'stopping'
            WHEN a.age > %(lease)s / 2 THEN 'late'
            ELSE 'live' END AS health,
       (SELECT count(*) FROM broadcast_jobs j WHERE j.owner = w.id AND j.status = 'sending')
           AS holding
FROM workers w CROSS JOIN LATERAL (SELECT senddock_heartbeat_age(w.heartbeat_at) AS age) a
ORDER BY w.id

-- name: deaths
-- The latest worker deaths, newest first (all, or those that held a broadcast's jobs).
SELECT d.id, d.worker_id, d.host, d.pid, d.started_at, d.last_heartbeat, d.found_at,
       d.reason, d.jobs_held, d.broadcast_ids
FROM worker_deaths d
WHERE %(broadcast_id)s::bigint IS NULL OR d.broadcast_ids @> ARRAY[%(broadcast_id)s::bigint]
ORDER BY d.found_at DESC, d.id DESC
LIMIT %(limit)s

-- name: death_count
-- How many worker deaths (all, or those that held a broadcast's jobs), and the latest's time.
SELECT count(*) AS n, max(found_at) AS last_at FROM worker_deaths d
WHERE %(broadcast_id)s::bigint IS NULL OR d.broadcast_ids @> ARRAY[%(broadcast_id)s::bigint]
