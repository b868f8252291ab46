-- The campaign list's overview (web/dashboard/overview.py): the audience's last 30 days and
-- what needs a person now. Each reads a window of rows through a BRIN index on its time
-- (0035), so the home page costs the same on a list of a million.

-- name: joined
-- New subscribers a day.
SELECT date_trunc('day', created_at) AS day, count(*)::bigint AS n
FROM subscribers WHERE created_at >= %(since)s GROUP BY 1

-- name: left
-- Departures a day: a list left on the preferences page (subscription_events), and every
-- unsubscribe that suppresses the address (one-click, the unsubscribe page, "unsubscribe from
-- everything": a suppression each, so its event is not counted again).
SELECT day, sum(n)::bigint AS n FROM (
    SELECT date_trunc('day', created_at) AS day, count(*) AS n
    FROM subscription_events
    WHERE created_at >= %(since)s AND action = 'leave'
    GROUP BY 1
    UNION ALL
    SELECT date_trunc('day', created_at), count(*)
    FROM suppressions
    WHERE created_at >= %(since)s AND reason = 'unsubscribe'
    GROUP BY 1
) d GROUP BY day

-- name: bounced
-- Addresses suppressed a day for a hard bounce or a complaint.
SELECT date_trunc('day', created_at) AS day, count(*)::bigint AS n
FROM suppressions
WHERE created_at >= %(since)s AND reason IN ('bounce', 'complaint')
GROUP BY 1

-- name: totals
-- The audience and the campaigns under way now, and the window's start on the database
-- clock (its day boundaries).
SELECT (SELECT count(*) FROM subscribers)::bigint AS subscribers,
       (SELECT count(*) FROM suppressions)::bigint AS suppressed,
       (SELECT count(*) FROM campaigns WHERE status = 'sending')::bigint AS sending,
       (SELECT count(*) FROM campaigns WHERE status = 'paused')::bigint AS paused,
       date_trunc('day', now()) - interval '29 days' AS since

-- name: worker_deaths
-- Worker processes found dead in the last day.
SELECT count(*)::bigint AS n FROM worker_deaths WHERE found_at > now() - interval '1 day'
