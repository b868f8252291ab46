-- The statements of who got what (campaigns/recipients.py): one row per job, filtered by job
-- status or by failure reason and searched by address (an ILIKE pattern), in the order the
-- subscribers joined (a chunk's jobs are not inserted in that order). The CLI streams them all;
-- the API and the dashboard show a page. The three differ only in their LIMIT and count.

-- name: broadcast_of
-- A campaign's broadcast (none until it is sent).
SELECT broadcast_id FROM campaigns WHERE id = %s

-- name: recipients
-- Every recipient, streamed through a server-side cursor by the CLI.
SELECT j.email, j.status, j.failure, j.attempts, j.sent_at, j.message_id,
       j.last_code, j.last_enhanced, j.last_reply, j.last_stage, j.settled_by, j.settled_at
FROM broadcast_jobs j
WHERE j.broadcast_id = %(b)s
  AND (%(status)s::text IS NULL OR j.status = %(status)s)
  AND (%(failure)s::text IS NULL OR j.failure = %(failure)s)
  AND (%(q)s::text IS NULL OR j.email ILIKE %(q)s)
ORDER BY j.subscriber_id

-- name: recipients_page
-- One page of `recipients`.
SELECT j.email, j.status, j.failure, j.attempts, j.sent_at, j.message_id,
       j.last_code, j.last_enhanced, j.last_reply, j.last_stage, j.settled_by, j.settled_at
FROM broadcast_jobs j
WHERE j.broadcast_id = %(b)s
  AND (%(status)s::text IS NULL OR j.status = %(status)s)
  AND (%(failure)s::text IS NULL OR j.failure = %(failure)s)
  AND (%(q)s::text IS NULL OR j.email ILIKE %(q)s)
ORDER BY j.subscriber_id
LIMIT %(limit)s OFFSET %(offset)s

-- name: recipients_page_counted
-- The same page with how many rows match in all, counted in the page's own snapshot.
SELECT j.email, j.status, j.failure, j.attempts, j.sent_at, j.message_id,
       j.last_code, j.last_enhanced, j.last_reply, j.last_stage, count(*) OVER () AS full_count, j.settled_by, j.settled_at
FROM broadcast_jobs j
WHERE j.broadcast_id = %(b)s
  AND (%(status)s::text IS NULL OR j.status = %(status)s)
  AND (%(failure)s::text IS NULL OR j.failure = %(failure)s)
  AND (%(q)s::text IS NULL OR j.email ILIKE %(q)s)
ORDER BY j.subscriber_id
LIMIT %(limit)s OFFSET %(offset)s
