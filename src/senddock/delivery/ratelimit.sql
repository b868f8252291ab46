-- Rate limits per SMTP server (delivery/ratelimit.py): a row per server in smtp_rate_windows
-- (migration 0007), shared by every worker process of a database.

-- name: acquire
-- Target 6: one statement takes min(asked, left in every window) of a server's permits and
-- counts them in its three windows at once. The row is locked first (FOR UPDATE re-reads the
-- newest version after waiting), so concurrent processes can never be granted more than a
-- window's limit between them. A window that has ended counts from 0; one never moves back (a
-- statement that waited while a later one moved it on counts in the newer window). Windows
-- follow the database clock, in UTC so every session agrees whatever its TimeZone; the seconds
-- each has left come back with the grant.
-- No row back: the server has no row yet (ensure, then ask again).
WITH now_ AS (
    SELECT date_trunc('second', now(), 'UTC') AS s, date_trunc('minute', now(), 'UTC') AS m,
           date_trunc('hour', now(), 'UTC') AS h
), cur AS (
    SELECT r.server,
           GREATEST(r.second_start, n.s) AS s_start,
           CASE WHEN r.second_start >= n.s THEN r.second_used ELSE 0 END AS s_used,
           GREATEST(r.minute_start, n.m) AS m_start,
           CASE WHEN r.minute_start >= n.m THEN r.minute_used ELSE 0 END AS m_used,
           GREATEST(r.hour_start, n.h) AS h_start,
           CASE WHEN r.hour_start >= n.h THEN r.hour_used ELSE 0 END AS h_used
    FROM smtp_rate_windows r, now_ n
    WHERE r.server = %(server)s
    FOR UPDATE OF r
), g AS (
    SELECT cur.*, GREATEST(0, LEAST(%(asked)s, %(second)s - s_used, %(minute)s - m_used,
                                    %(hour)s - h_used)) AS granted
    FROM cur
)
UPDATE smtp_rate_windows w
SET second_start = g.s_start, second_used = g.s_used + g.granted,
    minute_start = g.m_start, minute_used = g.m_used + g.granted,
    hour_start   = g.h_start, hour_used   = g.h_used + g.granted
FROM g
WHERE w.server = g.server
RETURNING g.granted, w.second_used, w.minute_used, w.hour_used,
          extract(epoch FROM w.second_start + interval '1 second' - now())::float8 AS second_ends,
          extract(epoch FROM w.minute_start + interval '1 minute' - now())::float8 AS minute_ends,
          extract(epoch FROM w.hour_start + interval '1 hour' - now())::float8 AS hour_ends;

-- name: ensure
-- A server's row, made the first time any process asks for its permits.
-- Its windows start at -infinity, so the first acquire counts each from 0; two processes
-- making it at once both go on (DO NOTHING).
INSERT INTO smtp_rate_windows
    (server, second_start, second_used, minute_start, minute_used, hour_start, hour_used)
VALUES (%(server)s, '-infinity', 0, '-infinity', 0, '-infinity', 0)
ON CONFLICT (server) DO NOTHING;
