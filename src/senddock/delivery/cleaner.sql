-- The cleaner's own statements (delivery/cleaner.py); what it freezes and deletes is the
-- queue's (queue/jobs.sql: freeze, delete_batch).

-- name: try_lock
-- One cleaner at a time across every worker: a session advisory lock, taken without waiting
-- (a worker that finds it held skips this pass), let go with its connection if the worker dies.
SELECT pg_try_advisory_lock(%s, %s) AS ok

-- name: unlock
-- The end of a pass: the next worker's cleaner may run.
SELECT pg_advisory_unlock(%s, %s)
