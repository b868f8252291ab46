-- 0024: what the dashboard's day-one pages need (issue 22 part 7). Additive only.

-- A list's description, shown on the lists page and edited there (empty when none).
ALTER TABLE lists ADD COLUMN description text NOT NULL DEFAULT '';

-- A subscriber's page reads their messages newest first (web/queries.sql, subscriber_history)
-- with no index of its own: on Postgres 18 broadcast_jobs_once (broadcast_id, subscriber_id)
-- serves it by skip scan, one descent per broadcast kept, and an index on subscriber_id would
-- cost every enqueue one more entry per job (bench/subscriber_page.py).

-- The page's bounces: every report matched to the subscriber (the 0015 index on
-- subscriber_id holds soft reports only).
CREATE INDEX bounce_findings_matched ON bounce_findings (subscriber_id, id)
    WHERE subscriber_id IS NOT NULL;
