-- 0024: what the dashboard's day-one pages need (issue 22 part 7). Additive only.

-- A list's description, shown on the lists page and edited there (empty when none).
ALTER TABLE lists ADD COLUMN description text NOT NULL DEFAULT '';

-- A subscriber's page reads their messages a page at a time, newest first (web/queries.sql,
-- subscriber_history): without this index that read is a scan of every job row. Neither
-- column is ever updated, so the job's updates (claim, mark, outcome) stay HOT; an enqueue
-- writes one more index entry per job.
CREATE INDEX broadcast_jobs_subscriber ON broadcast_jobs (subscriber_id, id);

-- The same page's bounces: every report matched to the subscriber (the 0015 index on
-- subscriber_id holds soft reports only).
CREATE INDEX bounce_findings_matched ON bounce_findings (subscriber_id, id)
    WHERE subscriber_id IS NOT NULL;
