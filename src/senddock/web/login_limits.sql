-- Sign-in attempts counted per key (web/login_limits.py), shared by every `serve` process of
-- a database. Windows are judged on the database clock.

-- name: reserve
-- Count one attempt for a key, restarting its window when the last one is over; the new
-- count. One statement, so two requests never both read the count before either adds to it.
-- The count stops at 1,000,000 so that a flood cannot overflow the column.
INSERT INTO login_attempts AS a (key, window_start, attempts) VALUES (%(key)s, now(), 1)
ON CONFLICT (key) DO UPDATE SET
    window_start = CASE WHEN a.window_start > now() - %(window)s
                        THEN a.window_start ELSE now() END,
    attempts = CASE WHEN a.window_start > now() - %(window)s
                    THEN least(a.attempts + 1, 1000000) ELSE 1 END
RETURNING attempts;

-- name: give_back
-- Uncount one attempt on each of these keys (never below 0): a success, or an attempt whose
-- password was never checked because the checker was busy.
UPDATE login_attempts SET attempts = greatest(attempts - 1, 0) WHERE key = ANY(%(keys)s);

-- name: clear_pair
-- A successful sign-in: its address+IP key starts afresh.
DELETE FROM login_attempts WHERE key = %(key)s;

-- name: sweep
-- Keys whose window is over, a few at a time (every attempt adds at most 3 keys). A locking
-- CTE with a literal LIMIT: `WHERE key IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)` may
-- delete more than n rows (DESIGN.md, invariant 2).
WITH old AS (
    SELECT key FROM login_attempts WHERE window_start <= now() - %(window)s
    ORDER BY window_start LIMIT 20 FOR UPDATE SKIP LOCKED
)
DELETE FROM login_attempts a USING old WHERE a.key = old.key;
