-- The bookkeeping of migrations (db/migrate.py): which numbered scripts under migrations/ are
-- applied. The scripts themselves are plain SQL files, run whole, each in its own transaction.

-- name: schema_exists
-- Has the schema ever been created? (A fresh database has no bookkeeping table to read.)
SELECT to_regclass('schema_migrations') IS NOT NULL AS e

-- name: applied
-- The versions already applied.
SELECT version FROM schema_migrations

-- name: lock
-- Migrators take turns: a transaction-level advisory lock, held until this migration's
-- transaction ends, so several processes may run `migrate` at once and each applies a
-- migration at most once.
SELECT pg_advisory_xact_lock(%s)

-- name: bookkeeping
-- The table that records applied migrations; made by the first migrator, under the lock.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version integer PRIMARY KEY, name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())

-- name: record
-- A migration is applied: written in its own transaction, so it counts only if it committed.
INSERT INTO schema_migrations (version, name) VALUES (%s, %s)
