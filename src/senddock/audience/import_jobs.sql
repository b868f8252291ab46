-- The statements of a durable HTTP import (audience/import_jobs.py, migration 0012).

-- name: create
-- A job for an upload, `queued`; its content goes into import_uploads in the same
-- transaction, so no job exists without its file.
INSERT INTO import_jobs (list_name) VALUES (%(list)s) RETURNING id

-- name: keep_upload
-- The upload, kept in the database until its import ends: any process can run the job, and
-- take it over after the one running it died. Sent in binary (%b): as text it would be
-- hex, twice its size.
INSERT INTO import_uploads (job_id, content) VALUES (%(id)s, %(content)b)

-- name: get
-- A job's state as the API and the dashboard show it.
SELECT id, list_name, status, rows_read, imported, rejected, errors, error, created_at,
       finished_at
FROM import_jobs WHERE id = %(id)s

-- name: open_jobs
-- The jobs not ended, oldest first: queued, or running (perhaps in a process that died:
-- the advisory lock tells, see try_lock). Read through the partial index import_jobs_open.
SELECT id FROM import_jobs WHERE status IN ('queued', 'running') ORDER BY id LIMIT 20

-- name: try_lock
-- One process at a time runs a job: it holds this session lock for as long as it does, and
-- a process that dies lets go of it with its connection, so another can resume the job.
SELECT pg_try_advisory_lock(%(cls)s, %(id)s::int) AS ok

-- name: unlock
-- Let go of a job this session ran (ended, or given up).
SELECT pg_advisory_unlock(%(cls)s, %(id)s::int)

-- name: take
-- The job just locked, marked running, if it has not ended meanwhile: where to resume
-- (rows_read rows of the file are done) and how many rejected lines it keeps already.
UPDATE import_jobs SET status = 'running'
WHERE id = %(id)s AND status IN ('queued', 'running')
RETURNING list_name, rows_read, jsonb_array_length(errors) AS kept

-- name: upload
-- The file to import.
SELECT content FROM import_uploads WHERE job_id = %(id)s

-- name: progress
-- One chunk's counts, in the transaction that imported its rows: a resumed import starts
-- after the last chunk committed, so each row is counted, and imported, exactly once.
UPDATE import_jobs
SET rows_read = rows_read + %(rows)s, imported = imported + %(imported)s,
    rejected = rejected + %(rejected)s, errors = errors || %(errors)s
WHERE id = %(id)s

-- name: done
-- The last chunk's transaction ends the job.
UPDATE import_jobs SET status = 'done', finished_at = now() WHERE id = %(id)s

-- name: fail
-- A job that cannot go on (the file unreadable, an error on a row's way in): `failed` with a
-- one-line reason; the rows of the chunks committed before stay imported and counted.
UPDATE import_jobs SET status = 'failed', error = %(error)s, finished_at = now()
WHERE id = %(id)s

-- name: drop_upload
-- An ended job's file is no longer needed.
DELETE FROM import_uploads WHERE job_id = %(id)s
