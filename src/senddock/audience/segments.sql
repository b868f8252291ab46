-- Saved segments by name, and how many subscribers a filter reaches (audience/segments.py).

-- name: add_segment
-- A new segment; its name is unique (a second one by that name is a Conflict).
INSERT INTO segments (name, filter) VALUES (%(name)s, %(filter)s) RETURNING id

-- name: all_segments
-- Every saved segment, by name.
SELECT id, name, filter, created_at, updated_at FROM segments ORDER BY name

-- name: find_segment
-- One segment by its exact name; no row: no such segment.
SELECT id, name, filter, created_at, updated_at FROM segments WHERE name = %(name)s

-- name: segment_by_id
-- One segment by id (what a campaign names).
SELECT id, name, filter, created_at, updated_at FROM segments WHERE id = %(id)s

-- name: delete_segment
-- A segment no campaign names (the key refuses one that is named: a Conflict).
DELETE FROM segments WHERE name = %(name)s

-- name: audience_count
-- How many would receive a broadcast now: what the queue's `enqueue` (queue/jobs.sql) selects,
-- counted: active, unsuppressed subscribers confirmed on any of `lists` (all subscribers when
-- NULL) that match the filter `{audience}` (segment_filter.py, placeholders only). The lists
-- are a probe of the membership key per subscriber, not `s.id IN (subquery)`: under the OR
-- that IN cannot become a join, and a million members overflow its hash (work_mem) into a
-- rescan per row (seen: over 9 minutes for 1,000,000).
SELECT count(*) AS n
FROM subscribers s
WHERE s.status = 'active'
  AND (%(lists)s::bigint[] IS NULL
       OR EXISTS (SELECT 1 FROM list_memberships m
                  WHERE m.list_id = ANY(%(lists)s::bigint[]) AND m.subscriber_id = s.id
                    AND m.status = 'confirmed'))
  AND NOT EXISTS (SELECT 1 FROM suppressions x WHERE lower(x.email) = lower(s.email))
  AND {audience}

-- name: audience_first
-- The first of who would receive a broadcast now (audience_count's rows, lowest id first):
-- the subscriber a preview or a test send renders as (issue 35). Walks the primary key and
-- stops at the first match.
SELECT s.id, s.email, s.name, s.attributes
FROM subscribers s
WHERE s.status = 'active'
  AND (%(lists)s::bigint[] IS NULL
       OR EXISTS (SELECT 1 FROM list_memberships m
                  WHERE m.list_id = ANY(%(lists)s::bigint[]) AND m.subscriber_id = s.id
                    AND m.status = 'confirmed'))
  AND NOT EXISTS (SELECT 1 FROM suppressions x WHERE lower(x.email) = lower(s.email))
  AND {audience}
ORDER BY s.id
LIMIT 1
