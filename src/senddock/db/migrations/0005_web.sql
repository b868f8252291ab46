-- 0005: the HTTP API and dashboard (issue 5): API tokens, admins, background imports.

-- API tokens: only the SHA-256 of each token is stored; the token itself is shown once.
CREATE TABLE api_tokens (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          text NOT NULL DEFAULT '',
    token_hash    text NOT NULL UNIQUE,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz
);

-- Dashboard logins; passwords hashed with argon2id.
CREATE TABLE admins (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email          text NOT NULL,
    password_hash  text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX admins_email_key ON admins (lower(email));

-- CSV imports started over HTTP, run in the background; polled for progress.
CREATE TABLE import_jobs (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    list_name    text NOT NULL,
    status       text NOT NULL DEFAULT 'queued'
                 CHECK (status IN ('queued', 'running', 'done', 'failed')),
    rows_read    integer NOT NULL DEFAULT 0,
    imported     integer NOT NULL DEFAULT 0,
    rejected     integer NOT NULL DEFAULT 0,
    -- The first rejected lines: [{"line": n, "reason": "..."}].
    errors       jsonb NOT NULL DEFAULT '[]'::jsonb,
    error        text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz
);

-- The key that signs dashboard session cookies, made once so sessions survive restarts;
-- SENDDOCK_SESSION_SECRET overrides it.
INSERT INTO app_secrets (name, value)
VALUES ('session_key', replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''))
ON CONFLICT (name) DO NOTHING;
