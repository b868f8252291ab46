-- What a later bounce or complaint does (queue/bounces.py), in the transaction of its finding.
--
-- Relies on these triggers and functions (each in db/schema.sql; tests/test_schema_file.py
-- checks that every one named here exists there):
--   trigger broadcast_jobs_count_updates (0010): fires on mark_job and leaves the counts as
--     they are (a job's status does not change); count_effect writes 'later:<kind>' itself.

-- name: mark_job
-- The job's record of its first later report, its kind and reason (0027): set only while NULL,
-- so the first report wins and a later one (another DSN, the complaint after a soft bounce)
-- leaves it. No row when retention deleted the job; the suppression and the counts apply all
-- the same.
UPDATE broadcast_jobs SET bounced_at = now(), bounce_kind = %(kind)s, bounce_reason = %(reason)s
WHERE broadcast_id = %(b)s AND subscriber_id = %(s)s AND bounced_at IS NULL

-- name: count_effect
-- Invariant 8 for later reports: a job counts once per kind (bounce_effects' primary key),
-- however many reports name it; only the report that inserted the row adds 1 to the
-- broadcast's counter 'later:<kind>', in the writer's slot as the triggers of 0010 do.
WITH new AS (
    INSERT INTO bounce_effects (broadcast_id, subscriber_id, kind)
    VALUES (%(b)s, %(s)s, %(kind)s)
    ON CONFLICT DO NOTHING
    RETURNING broadcast_id, kind
)
INSERT INTO broadcast_counts AS c (broadcast_id, state, slot, n)
SELECT broadcast_id, 'later:' || kind, pg_backend_pid() %% 16, 1 FROM new
ON CONFLICT (broadcast_id, state, slot) DO UPDATE SET n = c.n + excluded.n

-- name: soft_reports
-- The soft-bounce rule: distinct returned messages with a soft finding about this subscriber
-- in the last days (this one included: its row is written already). Through the partial
-- index bounce_findings_subscriber.
SELECT count(DISTINCT message_id)::int AS n FROM bounce_findings
WHERE subscriber_id = %(s)s AND kind = 'soft'
  AND created_at > now() - make_interval(days => %(days)s)

-- name: suppress
-- Invariant 6 for later reports: suppress the address the job went to (the subscriber's when
-- retention deleted the job), as suppress_bounces does at send time. An address suppressed
-- already keeps its first reason and detail (no row returned). `bounce_reason` (0027) is the
-- report's reason (userunknown, feedback, …): why a bounce or complaint removed the address.
INSERT INTO suppressions (email, reason, source_broadcast_id, detail, bounce_reason)
SELECT a.email, %(why)s, %(b)s, %(detail)s, %(reason)s
FROM (SELECT coalesce(
        (SELECT email FROM broadcast_jobs WHERE broadcast_id = %(b)s AND subscriber_id = %(s)s),
        (SELECT email FROM subscribers WHERE id = %(s)s)) AS email) a
WHERE a.email IS NOT NULL
ON CONFLICT ((lower(email))) DO NOTHING
RETURNING email

-- name: tag_bounced
-- Invariant 6: a bounced address's subscriber is marked bounced with its suppression (as
-- tag_all_bounced at send time); a complaint suppresses without the tag. An erased row (0031)
-- stays erased.
UPDATE subscribers SET status = 'bounced', updated_at = now()
WHERE lower(email) = lower(%(email)s) AND status = 'active'
