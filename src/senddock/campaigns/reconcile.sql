-- The statements of campaigns/reconcile.py (issue 41); the verdicts themselves are the queue's
-- (queue/jobs.sql: confirm, resend_unconfirmed, note_reconcile).

-- name: now
-- The database's clock: a job's claim and dot were stamped with it, so its window is judged
-- against it (a relay's log is judged with the slack for the two clocks).
SELECT now() AS now
