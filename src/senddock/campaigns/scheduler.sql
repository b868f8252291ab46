-- The scheduler's own statement (campaigns/scheduler.py); its transitions are the queue's
-- (queue/jobs.sql: due drafts).

-- name: in_past
-- Is a send time not ahead of the database's clock? The scheduler judges due drafts on that
-- clock, so a person's send time is checked against it too, not against this host's.
SELECT %s::timestamptz <= now() AS past
