-- 0012: an HTTP import is a durable job (issue 20.6). The upload is kept in Postgres until the
-- import ends, so any worker or `serve` process can pick the job up, and take it over after the
-- process running it died; progress is written per chunk in the same transaction as the rows
-- it imported (audience/import_jobs.py), so a resumed import imports every row exactly once.

-- The CSV as uploaded; the row goes when its import ends (done or failed).
CREATE TABLE import_uploads (
    job_id   bigint PRIMARY KEY REFERENCES import_jobs (id) ON DELETE CASCADE,
    content  bytea NOT NULL
);

-- Rows of the file (after its header) already imported or rejected: a resumed import skips
-- them. Written with `imported`, `rejected` and `rows_read`, in each chunk's transaction.
ALTER TABLE import_jobs ADD COLUMN rows_done integer NOT NULL DEFAULT 0;

-- What the import services poll for: the jobs not ended (few: each ends within minutes).
CREATE INDEX import_jobs_open ON import_jobs (id) WHERE status IN ('queued', 'running');
