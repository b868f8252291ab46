-- Who a campaign is for beyond its lists: its segment or its own filter (campaigns/audience.py).

-- name: campaign_filter
-- The filter a campaign narrows its lists by: its own, or its segment's as the segment reads
-- now (read at send, then fixed on the broadcast: queue/jobs.sql, new_broadcast).
SELECT c.id, c.audience_filter, c.segment_id, g.name AS segment_name, g.filter AS segment_filter,
       b.audience_filter AS sent_filter, c.broadcast_id
FROM campaigns c
LEFT JOIN segments g ON g.id = c.segment_id
LEFT JOIN broadcasts b ON b.id = c.broadcast_id
WHERE c.id = %(c)s

-- name: campaign_list_ids
-- The lists a campaign sends to.
SELECT list_id FROM campaign_lists WHERE campaign_id = %(c)s ORDER BY list_id
