-- Opens and clicks as `serve` received them (tracking/events.py), written in batches.

-- name: insert
-- One batch of events, one statement and one commit (group commit). An event whose broadcast
-- or link no longer exists is dropped here; one whose subscriber was deleted since is kept
-- unnamed: a batch never fails on a row, so the buffer never holds a poisoned batch.
INSERT INTO track_events (broadcast_id, subscriber_id, link_id, kind, at, user_agent,
                          machine, why)
SELECT e.broadcast_id, s.id, e.link_id, e.kind, e.at, e.user_agent, e.machine, e.why
FROM unnest(%(broadcast)s::bigint[], %(subscriber)s::bigint[], %(link)s::bigint[],
            %(kind)s::text[], %(at)s::timestamptz[], %(agent)s::text[], %(machine)s::bool[],
            %(why)s::text[])
     AS e(broadcast_id, subscriber_id, link_id, kind, at, user_agent, machine, why)
JOIN broadcasts b ON b.id = e.broadcast_id
LEFT JOIN subscribers s ON s.id = e.subscriber_id
WHERE e.link_id IS NULL
   OR EXISTS (SELECT 1 FROM tracked_links l
              WHERE l.id = e.link_id AND l.broadcast_id = e.broadcast_id)
