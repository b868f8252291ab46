-- 0009: `senddock serve` on the open internet (issue 19): login attempts shared by every
-- process, server-side sessions, API tokens that expire. See web/login_limits.py and
-- web/sessions.py.

-- Sign-in attempts per key (an address, an IP, or both) in a fixed window that starts at the
-- key's first attempt. An attempt is counted here, in one UPSERT ... RETURNING, before its
-- password is checked: every `serve` process shares the count, and parallel requests cannot
-- all slip through between a check and a count.
CREATE TABLE login_attempts (
    key           text PRIMARY KEY,
    window_start  timestamptz NOT NULL DEFAULT now(),
    attempts      integer NOT NULL DEFAULT 0
);
CREATE INDEX login_attempts_window ON login_attempts (window_start);

-- Dashboard sessions: the cookie carries a random id, only its SHA-256 is stored. Deleting
-- the row ends the session at once (logout, a new password, the admin removed).
CREATE TABLE sessions (
    id_hash       text PRIMARY KEY,
    admin_id      bigint NOT NULL REFERENCES admins (id) ON DELETE CASCADE,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sessions_admin ON sessions (admin_id);

-- An API token may expire (`senddock token create --expires-in 30d`); NULL never does.
ALTER TABLE api_tokens ADD COLUMN expires_at timestamptz;
