-- The worker process's own statement (delivery/worker.py); everything it does to jobs is the
-- queue's (queue/jobs.sql).

-- name: listen
-- Idle senders and the enqueuer wait on the channel that enqueue, resume and retry-failed
-- NOTIFY (queue/jobs.sql, wake) instead of polling hard. LISTEN takes a name, not a
-- parameter: {channel} is the one fixed channel (queue.NOTIFY_CHANNEL), quoted as an identifier.
LISTEN {channel}
