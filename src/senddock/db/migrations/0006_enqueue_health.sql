-- 0006: enqueue in the background, in chunks (issue 6, target 2), and a queue table that stays
-- healthy at ten million finished rows (target 5). See shared DESIGN.md, invariants 7 and 8.

-- Every attempt of a job carries the same Message-ID (invariant 9): its parts are fixed once per
-- broadcast, so every enqueue chunk formats the same one.
ALTER TABLE broadcasts ADD COLUMN message_token text;
ALTER TABLE broadcasts ADD COLUMN message_domain text;
-- Retention: a broadcast's final counts, frozen before its job rows are deleted, so `campaign
-- status` stays exact afterwards (delivery/cleaner.py).
ALTER TABLE broadcasts ADD COLUMN final_counts jsonb;
ALTER TABLE broadcasts ADD COLUMN purged_at timestamptz;

-- A broadcast still being enqueued has a row here per part of its subscriber id range (parts
-- are enqueued in parallel by different workers); the chunk that reaches a part's `last_id`
-- deletes the part's row, in the same transaction as its jobs. Jobs exist for every eligible
-- subscriber of the part with id <= after_id; the part's next chunk starts after it. The
-- recipients are the subscribers whose membership existed at `since` (the send), with ids up to
-- the highest then: later sign-ups are not swept in. Nothing finishes a broadcast that has a
-- row here (senddock/queue/jobs.sql, finish).
CREATE TABLE broadcast_enqueues (
    broadcast_id bigint NOT NULL REFERENCES broadcasts (id) ON DELETE CASCADE,
    part         integer NOT NULL,
    after_id     bigint NOT NULL,
    last_id      bigint NOT NULL,
    since        timestamptz NOT NULL,
    chunks       integer NOT NULL DEFAULT 0,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (broadcast_id, part)
);

-- Per-row foreign-key checks were most of the enqueue time: each inserted job ran a
-- `SELECT ... FOR KEY SHARE` on its subscriber (dirtying every subscriber page) and on its
-- broadcast; without them 1,000,000 jobs enqueue about 4x faster (measured, issue 6). The
-- references are kept by the code that writes jobs (a chunk selects the subscribers it enqueues
-- in the same statement; its broadcast row is never deleted) and by these triggers, which fire
-- only on the rare delete of a parent row.
ALTER TABLE broadcast_jobs DROP CONSTRAINT broadcast_jobs_broadcast_id_fkey;
ALTER TABLE broadcast_jobs DROP CONSTRAINT broadcast_jobs_subscriber_id_fkey;

-- A subscriber with jobs cannot be deleted (as the foreign key did: SQLSTATE 23503). The
-- advisory lock waits for enqueue chunks in flight (they hold it shared), so a job that a chunk
-- is about to commit is seen here, and a chunk that starts later no longer sees the subscriber.
CREATE FUNCTION senddock_subscriber_delete_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1397048900, 1);
    IF EXISTS (SELECT 1 FROM broadcast_jobs WHERE subscriber_id = OLD.id) THEN
        RAISE EXCEPTION 'subscriber % has delivery history (broadcast_jobs)', OLD.id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN OLD;
END $$;
CREATE TRIGGER subscribers_delete_guard BEFORE DELETE ON subscribers
    FOR EACH ROW EXECUTE FUNCTION senddock_subscriber_delete_guard();

-- Deleting a broadcast deletes its jobs (the old ON DELETE CASCADE). Nothing deletes broadcasts.
CREATE FUNCTION senddock_broadcast_delete_cascade() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM broadcast_jobs WHERE broadcast_id = OLD.id;
    RETURN OLD;
END $$;
CREATE TRIGGER broadcasts_delete_cascade BEFORE DELETE ON broadcasts
    FOR EACH ROW EXECUTE FUNCTION senddock_broadcast_delete_cascade();

-- One index fewer per inserted row and per status change (every transition is a non-HOT update,
-- so each writes a new entry in every index): the unique key that makes enqueue idempotent
-- (invariant 7) also carries status and failure, so exact counts per broadcast are an index-only
-- scan of it (invariant 8), as they were of broadcast_jobs_counts.
CREATE UNIQUE INDEX broadcast_jobs_once ON broadcast_jobs (broadcast_id, subscriber_id)
    INCLUDE (status, failure);
ALTER TABLE broadcast_jobs DROP CONSTRAINT broadcast_jobs_broadcast_id_subscriber_id_key;
DROP INDEX broadcast_jobs_counts;

-- Job ids are taken 100 at a time per session instead of one by one.
ALTER TABLE broadcast_jobs ALTER COLUMN id SET CACHE 100;

-- Autovacuum keeps up with a queue: vacuum (and mark all-visible, for index-only counts) after
-- 2 % of the rows changed or were inserted, without the cost-based sleep that lets a busy queue
-- outrun it. fillfactor 80 (0001) leaves room on each page for the new version of a row.
ALTER TABLE broadcast_jobs SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
