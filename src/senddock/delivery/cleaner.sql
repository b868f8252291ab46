-- The cleaner's own statements (delivery/cleaner.py); what it freezes and deletes is the
-- queue's (queue/jobs.sql: freeze, delete_batch).

-- name: try_lock
-- One cleaner at a time across every worker: a session advisory lock, taken without waiting
-- (a worker that finds it held skips this pass), let go with its connection if the worker dies.
SELECT pg_try_advisory_lock(%s, %s) AS ok

-- name: unlock
-- The end of a pass: the next worker's cleaner may run.
SELECT pg_advisory_unlock(%s, %s)

-- name: purge_raw
-- Retention of what came back (SENDDOCK_BOUNCE_RAW_DAYS, migration 0028): the bytes of the
-- oldest returned messages and provider events past it, a batch at a time; the row (its
-- digest still refuses the same message again), its findings and their effects stay. Read
-- through bounce_messages_raw_kept, which holds only rows not purged yet.
UPDATE bounce_messages SET raw = NULL
WHERE id IN (SELECT id FROM bounce_messages
             WHERE raw IS NOT NULL AND received_at < now() - make_interval(days => %(days)s)
             ORDER BY received_at LIMIT %(n)s)
