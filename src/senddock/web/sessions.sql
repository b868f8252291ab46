-- Dashboard sessions (web/sessions.py): a row per session, keyed by the SHA-256 of the random
-- id in the cookie, judged on the database clock so that every `serve` process agrees.

-- name: start
-- A new session of an admin; only the id's hash is stored.
INSERT INTO sessions (id_hash, admin_id) VALUES (%(id_hash)s, %(admin)s);

-- name: resolve
-- The session's admin if it is still alive (used within `idle`, signed in within
-- `lifetime`); using it keeps it alive, in the same statement, so there is no window between
-- the check and the touch. A deleted row (logout, new password, admin removed) ends it here.
UPDATE sessions SET last_seen_at = now()
WHERE id_hash = %(id_hash)s AND last_seen_at > now() - %(idle)s
  AND created_at > now() - %(lifetime)s
RETURNING admin_id;

-- name: sweep
-- Ended sessions are forgotten at each sign-in (there are few: one row per sign-in); the same
-- bounds as resolve, so a row this deletes is one resolve would refuse.
DELETE FROM sessions WHERE last_seen_at <= now() - %(idle)s OR created_at <= now() - %(lifetime)s;

-- name: end
-- End one session (logout): its other sessions, other browsers, stay.
DELETE FROM sessions WHERE id_hash = %(id_hash)s;
