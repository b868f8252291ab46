-- What a bounce or complaint after the 250 does (queue/bounces.py, migration 0015). Every
-- statement runs in the transaction that records the finding.

-- name: effect
-- The fence: one effect per (broadcast, subscriber, kind). No row returned when this job was
-- reported of this kind before (another DSN, the same event again): nothing else is done.
INSERT INTO bounce_effects (broadcast_id, subscriber_id, kind, email, finding_id)
VALUES (%(b)s, %(s)s, %(kind)s, %(email)s, %(finding)s)
ON CONFLICT (broadcast_id, subscriber_id, kind) DO NOTHING
RETURNING created_at

-- name: address
-- The address a matched finding is about: the job's, else (retention deleted the job) the
-- subscriber's; the finding's own recipient is the caller's last resort.
SELECT coalesce((SELECT email FROM broadcast_jobs
                 WHERE broadcast_id = %(b)s AND subscriber_id = %(s)s),
                (SELECT email FROM subscribers WHERE id = %(s)s)) AS email

-- name: mark_job
-- The job's record: a job bounced later shows when and the first kind. Fenced by
-- bounced_at IS NULL, so a second report does not move it; no row when retention deleted it.
UPDATE broadcast_jobs SET bounced_at = now(), bounce_kind = %(kind)s
WHERE broadcast_id = %(b)s AND subscriber_id = %(s)s AND bounced_at IS NULL

-- name: count_later
-- Invariant 8 for later bounces: the counter `later:<kind>` of the broadcast, once per job
-- and kind (the effect fence above), sharded by session like the triggers' counters.
INSERT INTO broadcast_counts AS c (broadcast_id, state, slot, n)
VALUES (%(b)s, 'later:' || %(kind)s, pg_backend_pid() %% 16, 1)
ON CONFLICT (broadcast_id, state, slot) DO UPDATE SET n = c.n + 1

-- name: soft_recent
-- Soft bounces of one address within the window, each job once (the effect fence).
SELECT count(*)::int AS n FROM bounce_effects
WHERE kind = 'soft' AND lower(email) = lower(%(email)s)
  AND created_at > now() - make_interval(days => %(days)s)

-- name: suppress
-- Invariant 6 after the 250: suppress the address (first reason kept, as at send time),
-- naming the broadcast it bounced from.
INSERT INTO suppressions (email, reason, source_broadcast_id, detail)
VALUES (%(email)s, %(reason)s, %(b)s, %(detail)s)
ON CONFLICT ((lower(email))) DO NOTHING

-- name: tag_bounced
-- Invariant 6: a bounced address's subscriber is marked bounced with its suppression (as
-- tag_all_bounced does at send time); a complaint leaves the subscriber's status alone.
UPDATE subscribers SET status = 'bounced', updated_at = now()
WHERE lower(email) = lower(%(email)s)
