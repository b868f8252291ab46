-- The statements of campaign records (campaigns/campaigns.py): a draft's row and its lists, and
-- the status a person reads. Every status transition is the queue layer's (queue/jobs.sql).

-- name: insert_campaign
-- A new draft (its status defaults to `draft`; send_at, if given, is when the scheduler sends it;
-- track, what it tracks: 0034).
INSERT INTO campaigns (name, subject, from_addr, reply_to, text_body, html_body, send_at, track)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING id

-- name: insert_campaign_lists
-- The lists a draft sends to, in the draft's own transaction: a campaign never exists without
-- its lists.
INSERT INTO campaign_lists (campaign_id, list_id) SELECT %s, unnest(%s::bigint[])

-- name: set_audience
-- A new draft's segment or its own filter (at most one: campaigns_one_audience_filter,
-- migration 0021), in the draft's own transaction.
UPDATE campaigns SET segment_id = %(segment)s, audience_filter = %(filter)s WHERE id = %(c)s

-- name: set_layout
-- A new draft's layout and Markdown body (migration 0020), in the draft's own transaction.
UPDATE campaigns SET layout_id = %(layout)s, markdown_body = %(markdown)s WHERE id = %(id)s

-- name: snapshot
-- Invariant 8: the status and the counts are read in one snapshot, so they agree with each
-- other (a commit between the two reads would show a job twice or not at all).
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ

-- name: status
-- The campaign, its broadcast, and whether workers are still enqueuing it (broadcast.py); and
-- the worker processes that died holding its jobs (delivery/rescuer.py): their number and the
-- latest, so a crash-looping worker shows where a person looks. And what it tracks (0034).
SELECT c.id, c.name, c.status, c.broadcast_id, b.pause_reason, b.last_sender_fault, c.track,
       b.final_counts, c.send_at, c.schedule_error,
       (SELECT count(*) FROM worker_deaths d
        WHERE d.broadcast_ids @> ARRAY[c.broadcast_id]) AS worker_deaths,
       (SELECT to_char(d.found_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
               || ' ' || d.host || ' pid ' || d.pid || ': ' || d.reason
        FROM worker_deaths d WHERE d.broadcast_ids @> ARRAY[c.broadcast_id]
        ORDER BY d.found_at DESC, d.id DESC LIMIT 1) AS last_worker_death,
       b.status = 'cancelled' OR NOT EXISTS (SELECT 1 FROM broadcast_enqueues e
                                          WHERE e.broadcast_id = c.broadcast_id) AS enqueue_done
FROM campaigns c LEFT JOIN broadcasts b ON b.id = c.broadcast_id WHERE c.id = %s
