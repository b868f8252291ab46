-- The statements of a CSV import (audience/importer.py): rows go by COPY into a temporary
-- table, one batch at a time, and are merged from there with set-based statements.

-- name: stage
-- Rows of one batch; emptied by the commit that merges them (ON COMMIT DELETE ROWS), so a
-- batch never sees the rows of the one before.
CREATE TEMP TABLE IF NOT EXISTS import_stage (
    line int, email text, name text, attrs jsonb, created timestamptz, blocked boolean
) ON COMMIT DELETE ROWS

-- name: copy_stage
-- One batch into the stage table, streamed (COPY): memory stays flat whatever the file's size.
COPY import_stage (line, email, name, attrs, created, blocked) FROM STDIN

-- name: seen
-- The addresses this import has seen (lower-cased), across batches and transactions: counting
-- the rows each batch adds tells rows from people (a case-duplicate row merges into one).
CREATE TEMP TABLE IF NOT EXISTS import_seen (email text PRIMARY KEY) ON COMMIT PRESERVE ROWS

-- name: forget_seen
-- A new import starts with no address seen (the table outlives an import on its connection).
TRUNCATE import_seen

-- name: count_new
-- The batch's addresses not seen before in this import: its rowcount is how many people the
-- batch added (one subscriber per address, case-insensitive).
INSERT INTO import_seen SELECT DISTINCT lower(email) FROM import_stage ON CONFLICT DO NOTHING

-- name: merge_batch
-- One statement per batch. The last row of an address in the batch wins; an unchanged
-- subscriber is not rewritten. Members: the subscribers written now (`up`), plus those that
-- existed before the statement (its snapshot), each looked up through the lower(email) index
-- (a scalar subquery: a join would hash the whole subscribers table for every batch).
-- New members are confirmed; an existing membership (unsubscribed too) is left as it is, and
-- the suppression list is never lifted: a suppressed or unsubscribed address stays so. A new
-- subscriber keeps the file's created_at (listmonk's export), else now. It answers how many
-- subscribers it created (xmax is 0 on a row this statement inserted, not on one it updated),
-- so an import's summary tells new people from known ones.
WITH up AS (
    INSERT INTO subscribers AS s (email, name, attributes, created_at)
    SELECT DISTINCT ON (lower(email)) email, name, attrs, coalesce(created, now())
    FROM import_stage
    ORDER BY lower(email), line DESC
    ON CONFLICT ((lower(email))) DO UPDATE
    SET name = CASE WHEN EXCLUDED.name <> '' THEN EXCLUDED.name ELSE s.name END,
        attributes = s.attributes || EXCLUDED.attributes,
        updated_at = now()
    WHERE (EXCLUDED.name <> '' AND EXCLUDED.name <> s.name)
       OR NOT (s.attributes @> EXCLUDED.attributes)
    RETURNING s.id, s.xmax = 0 AS created
), joined AS (
    INSERT INTO list_memberships (list_id, subscriber_id)
    SELECT %(list)s::bigint, id FROM up
    UNION
    SELECT %(list)s::bigint, known.id FROM (
        SELECT (SELECT s.id FROM subscribers s WHERE lower(s.email) = lower(i.email)) AS id
        FROM import_stage i
    ) known WHERE known.id IS NOT NULL
    ON CONFLICT DO NOTHING
)
SELECT count(*) FILTER (WHERE created) AS created FROM up

-- name: drop_seen
-- The end of an import: the seen addresses would otherwise live as long as the connection.
DROP TABLE import_seen

-- name: suppress_blocklisted
-- listmonk's `blocklisted` rows of the batch become suppressions, in the merge's transaction,
-- so no moment exists where such an address is a sendable member. An address already
-- suppressed keeps its first reason (DO NOTHING), as every suppression does.
INSERT INTO suppressions (email, reason, source_broadcast_id, detail)
SELECT DISTINCT ON (lower(email)) email, 'manual', NULL, %(detail)s
FROM import_stage WHERE blocked
ORDER BY lower(email)
ON CONFLICT ((lower(email))) DO NOTHING
