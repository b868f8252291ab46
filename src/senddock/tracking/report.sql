-- A campaign's opens and clicks (tracking/report.py), read from its broadcast's events.

-- name: totals
-- People (distinct subscribers: one job each) and events, human and machine apart, by kind.
-- An event whose subscriber was deleted since counts in the totals, not among the people.
-- A 'trap' row (the hidden link's requests) is read by no figure.
SELECT kind,
       count(DISTINCT subscriber_id) FILTER (WHERE NOT machine) AS people,
       count(DISTINCT subscriber_id) FILTER (WHERE machine) AS machine_people,
       count(*) FILTER (WHERE NOT machine) AS events,
       count(*) FILTER (WHERE machine) AS machine_events
FROM track_events WHERE broadcast_id = %(b)s
GROUP BY kind

-- name: links
-- Each tracked link of the broadcast, in the order of the message, with its human clicks,
-- the people who made them (deduplicated per job and link), and its machine clicks.
SELECT l.id, l.url,
       count(e.id) FILTER (WHERE NOT e.machine) AS clicks,
       count(DISTINCT e.subscriber_id) FILTER (WHERE NOT e.machine) AS unique_people,
       count(e.id) FILTER (WHERE e.machine) AS machine
FROM tracked_links l LEFT JOIN track_events e ON e.link_id = l.id AND e.kind = 'click'
WHERE l.broadcast_id = %(b)s
GROUP BY l.id, l.url, l.position
ORDER BY l.position, l.id
