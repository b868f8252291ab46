-- Failed webhook signatures per client (web/webhook_limits.py), kept in login_attempts under
-- `webhook:IP` keys and counted by login_limits.sql's `reserve`; its `sweep` clears them.

-- name: failures
-- How many failed signatures a client has in its current window (none once the window is
-- over), so that one over the limit is refused before its signature is checked, in every
-- `serve` process of the database.
SELECT attempts FROM login_attempts
WHERE key = %(key)s AND window_start > now() - %(window)s
