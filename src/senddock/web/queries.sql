-- The web's one read layer (web/queries.py): pages of long tables for the API and the
-- dashboard. Reads only; searches are ILIKE patterns built by queries.like().

-- name: subscribers
-- One page of subscribers, optionally matching a pattern (address or name) and on a list, with
-- what the API shows (attributes, updated_at) and what the dashboard shows (lists with their
-- membership status, suppressed). `{order}` is `s.id` (API) or `lower(s.email)` (dashboard),
-- a literal chosen from two in queries.py and not a parameter, so that each order is read
-- from its own index (the primary key, subscribers_email_key) and the scan stops after the
-- page; the extra columns are computed for the page's rows only. `{audience}` is a segment
-- filter over `s` (audience/segment_filter.py: placeholders only; `true` without one), so
-- subscribers are searched by attribute in the filter language campaigns use.
WITH page AS (
    SELECT s.id FROM subscribers s
    WHERE (%(q)s::text IS NULL OR s.email ILIKE %(q)s OR s.name ILIKE %(q)s)
      AND (%(list)s::text IS NULL OR EXISTS (
            SELECT 1 FROM list_memberships m JOIN lists l ON l.id = m.list_id
            WHERE m.subscriber_id = s.id AND l.name = %(list)s))
      AND {audience}
    ORDER BY {order}
    LIMIT %(limit)s OFFSET %(offset)s
)
SELECT s.id, s.email, s.name, s.status, s.attributes, s.created_at, s.updated_at,
       coalesce((SELECT string_agg(l.name || CASE WHEN m.status = 'confirmed' THEN ''
                                             ELSE ' (' || m.status || ')' END,
                                   ', ' ORDER BY l.name)
                 FROM list_memberships m JOIN lists l ON l.id = m.list_id
                 WHERE m.subscriber_id = s.id), '') AS lists,
       EXISTS (SELECT 1 FROM suppressions x WHERE lower(x.email) = lower(s.email)) AS suppressed
FROM page JOIN subscribers s ON s.id = page.id
ORDER BY {order}

-- name: subscriber_total
-- How many subscribers the `subscribers` page's filter matches (the API's `total`); the same
-- WHERE as that statement, kept in step with it. Counted apart so that the dashboard, which
-- shows no total, does not read every matching row for a page.
SELECT count(*)::bigint AS n FROM subscribers s
WHERE (%(q)s::text IS NULL OR s.email ILIKE %(q)s OR s.name ILIKE %(q)s)
  AND (%(list)s::text IS NULL OR EXISTS (
        SELECT 1 FROM list_memberships m JOIN lists l ON l.id = m.list_id
        WHERE m.subscriber_id = s.id AND l.name = %(list)s))
  AND {audience}

-- name: subscriber_addresses
-- The addresses the `subscribers` page's filter matches, by id, at most `limit` (the
-- dashboard's actions on a whole filter, web/dashboard/subscriber_bulk.py): the same WHERE as
-- that statement, kept in step with it.
SELECT s.id, s.email FROM subscribers s
WHERE (%(q)s::text IS NULL OR s.email ILIKE %(q)s OR s.name ILIKE %(q)s)
  AND (%(list)s::text IS NULL OR EXISTS (
        SELECT 1 FROM list_memberships m JOIN lists l ON l.id = m.list_id
        WHERE m.subscriber_id = s.id AND l.name = %(list)s))
  AND {audience}
  AND (%(ids)s::bigint[] IS NULL OR s.id = ANY(%(ids)s::bigint[]))
ORDER BY s.id
LIMIT %(limit)s

-- name: membership_status
-- A subscriber's standing on a list by address and list name (none: not on it).
SELECT m.status FROM list_memberships m
JOIN subscribers s ON s.id = m.subscriber_id JOIN lists l ON l.id = m.list_id
WHERE lower(s.email) = lower(%(email)s) AND l.name = %(list)s

-- name: subscriber_email
-- A subscriber's address (the API names it in its answers), by primary key.
SELECT email FROM subscribers WHERE id = %(id)s

-- name: snapshot
-- Invariant 8: a page of campaigns and their counts are read in one snapshot, so they agree.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ

-- name: campaigns
-- Invariant 8: one page of campaigns, newest first, optionally of one status, archived or not
-- (campaigns/edits.py), with every
-- column the API and the dashboard list show. No count is read here: each broadcast's counts
-- come from queue/counts.py, a few counter rows per campaign, whatever its broadcast's size
-- (this statement used to count broadcast_jobs per campaign per request).
SELECT c.id, c.name, c.status, c.subject, c.from_addr, c.send_at, c.schedule_error,
       c.broadcast_id, c.created_at, b.pause_reason,
       b.created_at AS started_at, b.finished_at,
       coalesce((SELECT array_agg(l.name ORDER BY l.name) FROM campaign_lists cl
                 JOIN lists l ON l.id = cl.list_id WHERE cl.campaign_id = c.id), '{}') AS lists,
       count(*) OVER () AS full_count
FROM campaigns c LEFT JOIN broadcasts b ON b.id = c.broadcast_id
WHERE (%(status)s::text IS NULL OR c.status = %(status)s)
  AND (c.archived_at IS NOT NULL) = %(archived)s
ORDER BY c.id DESC
LIMIT %(limit)s OFFSET %(offset)s

-- name: campaign_total
-- How many campaigns of that status (archived or not) there are, for a page past the last
-- (which has no row to carry the window count of `campaigns`).
SELECT count(*)::bigint AS n FROM campaigns c
WHERE (%(status)s::text IS NULL OR c.status = %(status)s)
  AND (c.archived_at IS NOT NULL) = %(archived)s

-- name: campaign
-- One campaign's fields for its dashboard page, with its lists and when its broadcast began and
-- ended (its counts are queue/counts.py's, through campaigns.status).
SELECT c.id, c.name, c.status, c.subject, c.from_addr, c.reply_to, c.created_at, c.send_at,
       c.broadcast_id, b.created_at AS started_at, b.finished_at, c.archived_at,
       array(SELECT l.name FROM campaign_lists cl JOIN lists l ON l.id = cl.list_id
             WHERE cl.campaign_id = c.id ORDER BY l.name) AS lists
FROM campaigns c LEFT JOIN broadcasts b ON b.id = c.broadcast_id WHERE c.id = %(id)s

-- name: campaign_broadcast
-- A campaign's broadcast, to page its recipients (NULL before it is sent).
SELECT broadcast_id FROM campaigns WHERE id = %(id)s

-- name: rate
-- Messages the server accepted in the last minute, and the seconds since the first of them (or
-- the broadcast's start, if later): the span they were actually sent over (database clock).
-- Reads the last minute's sent rows of one broadcast only.
SELECT count(*)::int AS n,
       extract(epoch FROM now() - greatest(
           min(sent_at), (SELECT created_at FROM broadcasts WHERE id = %(b)s)))::float8 AS seconds
FROM broadcast_jobs
WHERE broadcast_id = %(b)s AND status = 'sent' AND sent_at > now() - interval '1 minute'

-- name: per_minute
-- Sent per minute, the latest `minutes` minutes that had a send (the campaign page's chart).
SELECT date_trunc('minute', sent_at) AS minute, count(*)::int AS sent
FROM broadcast_jobs WHERE broadcast_id = %(b)s AND status = 'sent'
GROUP BY 1 ORDER BY 1 DESC LIMIT %(minutes)s

-- name: now_minute
-- The database's current minute: the chart of a live campaign ends there (database clock).
SELECT date_trunc('minute', now()) AS now

-- name: suppressions
-- One page of the suppression list, optionally matching a pattern and of one reason.
SELECT email, reason, created_at, coalesce(detail, '') AS detail, bounce_reason
FROM suppressions
WHERE (%(q)s::text IS NULL OR email ILIKE %(q)s)
  AND (%(reason)s::text IS NULL OR reason = %(reason)s)
ORDER BY lower(email) LIMIT %(limit)s OFFSET %(offset)s

-- name: subscriber
-- One subscriber's fields for their dashboard page, by primary key, with their suppression
-- (case ignored, as the claim tests it), if any.
SELECT s.id, s.email, s.name, s.status, s.attributes, s.created_at, s.updated_at,
       x.reason AS suppressed, x.created_at AS suppressed_at
FROM subscribers s LEFT JOIN suppressions x ON lower(x.email) = lower(s.email)
WHERE s.id = %(id)s

-- name: subscriber_lists
-- Every list a subscriber is on, with the membership's status and when it last changed.
SELECT l.id, l.name, m.status, m.created_at, m.updated_at
FROM list_memberships m JOIN lists l ON l.id = m.list_id
WHERE m.subscriber_id = %(id)s ORDER BY l.name

-- name: subscriber_history
-- One page of a subscriber's messages, newest job first: each job's campaign, status, when it
-- was sent and the relay's last reply; LIMIT one more than shown. Postgres 18 reads it from
-- broadcast_jobs_once by skip scan, one descent per broadcast, however many jobs each has
-- (no index on subscriber_id, which every enqueue would pay for: 0024, bench/subscriber_page.py).
SELECT j.id, c.id AS campaign_id, c.name AS campaign, j.status, j.failure, j.attempts,
       j.sent_at, j.last_code, j.last_enhanced, j.last_reply, j.bounce_kind, j.bounce_reason,
       j.updated_at
FROM broadcast_jobs j JOIN broadcasts b ON b.id = j.broadcast_id
JOIN campaigns c ON c.id = b.campaign_id
WHERE j.subscriber_id = %(id)s
ORDER BY j.id DESC LIMIT %(limit)s OFFSET %(offset)s

-- name: subscriber_bounces
-- One page of the bounces and complaints reported about a subscriber after the 250, newest
-- first: those matched to one of their jobs (bounce_findings_matched, 0024) and those that
-- matched no job but name their address (bounce_findings_recipient, 0014).
SELECT f.id, f.kind, f.reason, f.status, f.reply, f.diagnostic, f.created_at, f.broadcast_id,
       m.source, c.id AS campaign_id, c.name AS campaign
FROM bounce_findings f JOIN bounce_messages m ON m.id = f.message_id
LEFT JOIN broadcasts b ON b.id = f.broadcast_id LEFT JOIN campaigns c ON c.id = b.campaign_id
WHERE f.subscriber_id = %(id)s
   OR (f.subscriber_id IS NULL AND lower(f.recipient) = lower(%(email)s))
ORDER BY f.id DESC LIMIT %(limit)s OFFSET %(offset)s
