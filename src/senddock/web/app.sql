-- The web application's own statements (web/app.py): the key that signs session cookies.

-- name: make_session_key
-- Made once per database, by whichever `serve` process comes first (DO NOTHING for the
-- others): sessions survive restarts, and every process of one database accepts the same
-- cookies.
INSERT INTO app_secrets (name, value)
VALUES ('session_key', %s) ON CONFLICT (name) DO NOTHING

-- name: session_key
-- The stored session key (the one made above, whoever made it).
SELECT value FROM app_secrets WHERE name = 'session_key'
