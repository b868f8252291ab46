-- /metrics' aggregate reads (web/metrics.py), made at scrape time: every `serve` process shows
-- the same numbers, the queue's. The counters themselves are queue/counts.sql's.

-- name: latency
-- Claim-to-send latency of the messages sent in the last 15 minutes (recent rows only).
SELECT count(*) AS n, coalesce(sum(extract(epoch FROM sent_at - claimed_at)), 0)::float AS total,
       percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP
           (ORDER BY extract(epoch FROM sent_at - claimed_at)) AS q
FROM broadcast_jobs
WHERE status = 'sent' AND claimed_at IS NOT NULL AND sent_at >= now() - interval '15 minutes'

-- name: replies
-- The last reply of each job by class (2xx, 4xx, 5xx).
SELECT (last_code / 100)::text || 'xx' AS class, count(*) AS n FROM broadcast_jobs
WHERE last_code BETWEEN 200 AND 599 GROUP BY 1

-- name: workers
-- Live workers (not stopping, heartbeat within the lease on the database clock:
-- senddock_heartbeat_age, the rescuer's and `senddock workers`' too) and registered ones.
SELECT count(*) FILTER (WHERE NOT stopping AND senddock_heartbeat_age(heartbeat_at) <= %s)
           AS live,
       count(*) AS registered
FROM workers

-- name: open_campaigns
-- Campaigns sending or paused, with their broadcast: their state as a person reads it
-- (queue.counts.shown_status) is counted per state.
SELECT status, broadcast_id FROM campaigns
WHERE status IN ('sending', 'paused') AND broadcast_id IS NOT NULL

-- name: deaths
-- Worker processes found dead (delivery/rescuer.py), and the latest one's time and reason.
SELECT (SELECT count(*) FROM worker_deaths) AS n,
       extract(epoch FROM d.found_at)::float AS at, d.reason
FROM (SELECT 1) one LEFT JOIN LATERAL (
    SELECT found_at, reason FROM worker_deaths ORDER BY found_at DESC, id DESC LIMIT 1
) d ON true
