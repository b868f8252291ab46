-- What `senddock demo` looks at to tell its story (demo.py): reads only, of the queue's rows;
-- the demo changes nothing in the database but through the product's own commands.

-- name: worker_of_pid
-- The row the worker process with this pid on this host registered (its latest, if the pid
-- was used before).
SELECT id FROM workers WHERE pid = %s AND host = %s ORDER BY id DESC LIMIT 1

-- name: held
-- The jobs a worker holds in `sending` in a broadcast: what a SIGKILL left in flight.
SELECT lower(email) AS email FROM broadcast_jobs
WHERE broadcast_id = %s AND status = 'sending' AND owner = %s

-- name: lock_held
-- Is a dead worker's advisory lock (delivery/rescuer.sql, lock) still held? Its database
-- session outlives the process for a moment.
SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory'
  AND classid = %s AND objsubid = 2 AND objid::bigint = %s AND granted

-- name: still_sending
-- How many jobs a worker still holds in `sending`: zero once it was rescued.
SELECT count(*) AS n FROM broadcast_jobs WHERE status = 'sending' AND owner = %s

-- name: outcomes
-- Every job of the broadcast with its outcome: the proof's counts.
SELECT email, status, failure, attempts FROM broadcast_jobs WHERE broadcast_id = %s

-- name: suppressed
-- The addresses the broadcast's bounces suppressed.
SELECT lower(email) AS email FROM suppressions WHERE source_broadcast_id = %s

-- name: unconfirmed_of
-- How many jobs a dead worker left unconfirmed (the rescue keeps their owner): its final dot
-- went, no outcome was recorded.
SELECT count(*) AS n FROM broadcast_jobs WHERE status = 'unconfirmed' AND owner = %s
