-- Credentials (web/auth.py): dashboard admins, API tokens. A secret is never stored: an
-- admin's password as its argon2id hash, a token as its SHA-256.

-- name: create_admin
-- A new admin; no row back when the address is taken (case ignored), reported as AuthError.
INSERT INTO admins (email, password_hash) VALUES (%(email)s, %(password_hash)s)
ON CONFLICT ((lower(email))) DO NOTHING RETURNING id;

-- name: list_admins
-- Every admin, never the password hash.
SELECT id, email, created_at FROM admins ORDER BY id;

-- name: remove_admin
-- Delete an admin (case ignored); its sessions go by cascade, so it is out at the next
-- request in every `serve` process.
DELETE FROM admins WHERE lower(email) = lower(%(email)s) RETURNING id;

-- name: set_password
-- A new password ends every session of the admin, in the same statement: whoever knew the
-- old one and signed in with it is out at their next request (web/sessions.py).
WITH changed AS (
    UPDATE admins SET password_hash = %(password_hash)s WHERE lower(email) = lower(%(email)s)
    RETURNING id
), ended AS (
    DELETE FROM sessions s USING changed WHERE s.admin_id = changed.id
)
SELECT id FROM changed;

-- name: login_hash
-- The admin a sign-in names, with its hash. lower() finds the candidate through the unique
-- index; the caller then compares auth.login_address of both, the form the attempt was counted
-- under (web/login_limits.py), whatever Postgres's lower() does with non-ASCII.
SELECT id, email, password_hash FROM admins WHERE lower(email) = lower(%(email)s);

-- name: create_token
-- A new API token by its SHA-256; it expires `life` after now on the database clock (NULL
-- life: never), the clock token_ok judges it by.
INSERT INTO api_tokens (name, token_hash, expires_at) VALUES (%(name)s, %(token_hash)s, now() + %(life)s);

-- name: list_tokens
-- Every API token with whether it has expired (database clock), never the token or its hash.
SELECT id, name, created_at, last_used_at, expires_at,
       coalesce(expires_at <= now(), false) AS expired
FROM api_tokens ORDER BY id;

-- name: revoke_token
-- Delete a token: token_ok refuses it at its next request, in every process.
DELETE FROM api_tokens WHERE id = %(token)s RETURNING id;

-- name: token_ok
-- Whether a token is stored and unexpired, noting its use in the same statement: one round
-- trip per authenticated request, and a revoked or expired token is refused at once.
UPDATE api_tokens SET last_used_at = now()
WHERE token_hash = %(token_hash)s AND (expires_at IS NULL OR expires_at > now())
RETURNING id;
