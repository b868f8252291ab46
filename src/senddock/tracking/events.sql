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
RETURNING id

-- The evidence that needs other rows (tracking/events.py, item 3 of issue 37), run in the
-- batch's transaction right after its insert, so no reader sees the batch unjudged. Each
-- statement marks only events still judged human (the first evidence found keeps its why),
-- and never drops one. %(ids)s: the ids the insert returned. An anonymous campaign's events
-- name nobody, so none of these apply to them.

-- name: judge_prefetch
-- An open or click within %(prefetch)s seconds of its job's delivery (broadcast_jobs.sent_at, the
-- 250, on the database clock; the event's time is serve's clock: both are this host's or
-- NTP's) is a machine's: a proxy or scanner fetching on arrival. One job per
-- (broadcast, subscriber) (broadcast_jobs_once); only the batch's own events.
UPDATE track_events e
SET machine = true,
    why = format('%%s %%s s after delivery',
                 CASE e.kind WHEN 'open' THEN 'opened' ELSE 'clicked' END,
                 to_char(greatest(extract(epoch FROM e.at - j.sent_at), 0), 'FM9990.0'))
FROM broadcast_jobs j
WHERE e.id = ANY(%(ids)s::bigint[])
  AND NOT e.machine AND e.kind IN ('open', 'click')
  AND j.broadcast_id = e.broadcast_id AND j.subscriber_id = e.subscriber_id
  AND j.sent_at IS NOT NULL
  AND e.at < j.sent_at + make_interval(secs => %(prefetch)s)

-- name: judge_scan
-- A scanner following every link: %(links)s or more distinct links of one message clicked by
-- one job within %(scan)s seconds makes all the clicks of that burst a machine's ("4 links
-- within 1.2 s"). Looks at the clicks of the people in the batch near the batch's times,
-- earlier batches' included (a burst split across batches is found by its last one), so the
-- self-join stays within one person's few seconds.
WITH batch AS (
    SELECT broadcast_id, subscriber_id, min(at) AS first, max(at) AS last
    FROM track_events
    WHERE id = ANY(%(ids)s::bigint[]) AND kind = 'click' AND subscriber_id IS NOT NULL
    GROUP BY broadcast_id, subscriber_id
), near AS (
    SELECT e.id, e.broadcast_id, e.subscriber_id, e.link_id, e.at, e.machine
    FROM batch b JOIN track_events e
      ON e.broadcast_id = b.broadcast_id AND e.kind = 'click'
     AND e.subscriber_id = b.subscriber_id
     AND e.at BETWEEN b.first - make_interval(secs => %(scan)s)
                  AND b.last + make_interval(secs => %(scan)s)
), bursts AS (
    SELECT c.broadcast_id, c.subscriber_id, c.at AS start,
           max(d.at) AS finish, count(DISTINCT d.link_id) AS links
    FROM near c JOIN near d
      ON d.broadcast_id = c.broadcast_id AND d.subscriber_id = c.subscriber_id
     AND d.at >= c.at AND d.at <= c.at + make_interval(secs => %(scan)s)
    GROUP BY c.broadcast_id, c.subscriber_id, c.at
    HAVING count(DISTINCT d.link_id) >= %(links)s
), marked AS (
    SELECT DISTINCT ON (n.id) n.id, b.links, b.finish - b.start AS took
    FROM near n JOIN bursts b
      ON b.broadcast_id = n.broadcast_id AND b.subscriber_id = n.subscriber_id
     AND n.at BETWEEN b.start AND b.finish
    WHERE NOT n.machine
    ORDER BY n.id, b.links DESC, b.start
)
UPDATE track_events e
SET machine = true,
    why = format('%%s links within %%s s', m.links,
                 to_char(extract(epoch FROM m.took), 'FM9990.0'))
FROM marked m
WHERE e.id = m.id

-- name: judge_trap
-- The hidden trap link (messages/tracking.py): no person sees it, so whoever follows it is a
-- machine, and so are that job's clicks within %(trap)s seconds of it, before or after,
-- earlier batches' included.
WITH traps AS (
    SELECT DISTINCT t.broadcast_id, t.subscriber_id, t.at
    FROM track_events b
    JOIN track_events t
      ON t.broadcast_id = b.broadcast_id AND t.subscriber_id = b.subscriber_id
     AND t.kind = 'trap'
     AND t.at BETWEEN b.at - make_interval(secs => %(trap)s)
                  AND b.at + make_interval(secs => %(trap)s)
    WHERE b.id = ANY(%(ids)s::bigint[]) AND b.kind IN ('click', 'trap')
      AND b.subscriber_id IS NOT NULL
)
UPDATE track_events e
SET machine = true, why = 'followed the hidden trap link'
FROM traps t
WHERE e.broadcast_id = t.broadcast_id AND e.subscriber_id = t.subscriber_id
  AND e.kind = 'click' AND NOT e.machine
  AND e.at BETWEEN t.at - make_interval(secs => %(trap)s)
               AND t.at + make_interval(secs => %(trap)s)
