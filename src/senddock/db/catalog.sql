-- The catalog reads behind db/schema.sql (db/schema.py): the schema a fresh database holds after
-- every migration, object by object, in name order so that the file is the same on any machine.
-- Definitions come from the server's own deparsers (pg_get_*def), not from pg_dump: no client
-- binary, no version mismatch between pg_dump and the server, no per-run tokens to strip.

-- name: major_version
-- The server's major version: the deparsers' output can change from one to the next.
SELECT current_setting('server_version_num')::int / 10000 AS major

-- name: extensions
-- The extensions installed beyond plpgsql (which every database has).
SELECT extname AS name FROM pg_extension WHERE extname <> 'plpgsql' ORDER BY extname

-- name: types
-- Enum and domain types of our schema, with what defines them.
SELECT t.typname AS name, t.typtype AS kind,
       CASE t.typtype
           WHEN 'e' THEN (SELECT string_agg(quote_literal(e.enumlabel), ', '
                                            ORDER BY e.enumsortorder)
                          FROM pg_enum e WHERE e.enumtypid = t.oid)
           ELSE format_type(t.typbasetype, t.typtypmod)
       END AS definition
FROM pg_type t
WHERE t.typnamespace = current_schema()::regnamespace AND t.typtype IN ('e', 'd')
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = t.oid AND d.deptype = 'e')
ORDER BY t.typname

-- name: sequences
-- Sequences of our own, not those behind an identity or serial column (shown with the column).
SELECT c.relname AS name, format_type(s.seqtypid, NULL) AS type
FROM pg_class c JOIN pg_sequence s ON s.seqrelid = c.oid
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'S'
  AND NOT EXISTS (SELECT 1 FROM pg_depend d
                  WHERE d.objid = c.oid AND d.deptype IN ('a', 'i', 'e'))
ORDER BY c.relname

-- name: tables
-- Our tables, with their persistence and storage parameters (fillfactor, autovacuum).
SELECT c.oid, c.relname AS name, c.relpersistence = 'u' AS unlogged,
       coalesce(array_to_string(c.reloptions, ', '), '') AS options
FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'e')
ORDER BY c.relname

-- name: columns
-- A table's columns in their order, each with its type, default or generation, and NOT NULL.
SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null,
       a.attidentity AS identity, a.attgenerated AS generated,
       pg_get_expr(d.adbin, d.adrelid, true) AS expression,
       CASE WHEN a.attcollation <> t.typcollation THEN co.collname END AS collation
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
LEFT JOIN pg_collation co ON co.oid = a.attcollation
WHERE a.attrelid = %(table)s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum

-- name: constraints
-- A table's constraints, primary key first, then unique, foreign keys, checks, exclusions
-- (NOT NULL is shown on its column).
SELECT conname AS name, pg_get_constraintdef(oid, true) AS definition
FROM pg_constraint
WHERE conrelid = %(table)s AND contype IN ('p', 'u', 'f', 'c', 'x')
ORDER BY array_position(ARRAY['p', 'u', 'f', 'c', 'x']::"char"[], contype), conname

-- name: indexes
-- A table's indexes but those a constraint above makes.
SELECT pg_get_indexdef(i.indexrelid) AS definition
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = %(table)s
  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid
                  AND k.conrelid = i.indrelid AND k.contype IN ('p', 'u', 'x'))
ORDER BY c.relname

-- name: triggers
-- A table's triggers (not the internal ones that enforce foreign keys).
SELECT tgname AS name, pg_get_triggerdef(oid, true) AS definition
FROM pg_trigger
WHERE tgrelid = %(table)s AND NOT tgisinternal
ORDER BY tgname

-- name: views
-- Our views and materialized views, with their queries.
SELECT c.relname AS name, c.relkind = 'm' AS materialized,
       pg_get_viewdef(c.oid, true) AS definition
FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('v', 'm')
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'e')
ORDER BY c.relname

-- name: functions
-- Our functions (trigger functions among them), whole, as the server would recreate them.
SELECT p.proname AS name, pg_get_functiondef(p.oid) AS definition
FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace AND p.prokind IN ('f', 'p')
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')
ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)

-- ===== A scratch database to migrate and read (dev.py schema, tests/test_schema_file.py) =====

-- name: create_database
-- A new, empty database ({name}: a quoted identifier the caller made, never user input).
CREATE DATABASE {name}

-- name: drop_database
-- The scratch database, gone whoever is still connected.
DROP DATABASE IF EXISTS {name} WITH (FORCE)
