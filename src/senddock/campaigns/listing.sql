-- The statements of `campaign list` and `campaign show` (campaigns/listing.py). Counts are the
-- queue's (queue/counts.py), read in the same snapshot as the campaigns.

-- name: snapshot
-- Invariant 8: the campaigns and their counts are read in one snapshot, so they agree.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ

-- name: list
-- Every campaign, newest first, archived or not (campaigns/edits.py); its counts are the
-- queue's (queue/counts.py).
SELECT c.id, c.name, c.status, c.created_at, c.send_at, c.broadcast_id
FROM campaigns c
WHERE (c.archived_at IS NOT NULL) = %(archived)s
ORDER BY c.id DESC

-- name: show
-- Every field of a campaign but its bodies, whose sizes (bytes, UTF-8) stand for them.
SELECT c.id, c.name, c.status, c.subject, c.from_addr, c.reply_to,
       coalesce((SELECT array_agg(l.name ORDER BY l.name) FROM campaign_lists cl
                 JOIN lists l ON l.id = cl.list_id WHERE cl.campaign_id = c.id), '{}') AS lists,
       c.send_at, c.schedule_error, c.broadcast_id, c.created_at, c.updated_at, c.archived_at,
       coalesce(octet_length(c.text_body), 0) AS text_bytes,
       coalesce(octet_length(c.html_body), 0) AS html_bytes,
       coalesce(octet_length(c.markdown_body), 0) AS markdown_bytes,
       (SELECT l.name FROM layouts l WHERE l.id = c.layout_id) AS layout,
       (SELECT g.name FROM segments g WHERE g.id = c.segment_id) AS segment,
       c.audience_filter AS filter
FROM campaigns c WHERE c.id = %s
