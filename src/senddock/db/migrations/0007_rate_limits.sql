-- 0007: per-SMTP-server rate limits shared by every worker process (issue 6, target 6).
-- One row per server (its name from SENDDOCK_SMTP_URL) holding three fixed windows, the
-- current second, minute and hour, and how many permits each has handed out. A process takes
-- a small batch of permits with one statement that grants min(asked, left in every window)
-- under the row's lock (delivery/ratelimit.py); a window that has ended starts again at 0.
-- A row is made the first time any process asks for that server's permits.
-- The limits themselves are configuration, passed in with each statement.
CREATE TABLE smtp_rate_windows (
    server        text PRIMARY KEY,
    second_start  timestamptz NOT NULL,
    second_used   bigint NOT NULL,
    minute_start  timestamptz NOT NULL,
    minute_used   bigint NOT NULL,
    hour_start    timestamptz NOT NULL,
    hour_used     bigint NOT NULL
) WITH (fillfactor = 50);  -- updated many times a second: leave room for HOT updates
