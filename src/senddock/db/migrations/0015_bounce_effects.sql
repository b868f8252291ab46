-- 0015: what a bounce or complaint that came after the 250 does (issue 21); the writer is
-- senddock/queue/bounces.py. A matched finding suppresses the address (hard, complaint, the
-- Nth soft within a window), marks its sent job, and counts once per job and kind.

-- One row per (job, kind) ever applied: the fence that makes a second report about the same
-- job and kind (another DSN, the same event twice) change nothing. Keyed by the broadcast and
-- subscriber, not the job's id: retention deletes jobs, and a bounce that comes after still
-- suppresses and counts. `email` is the address it was about (the soft window counts by it).
CREATE TABLE bounce_effects (
    broadcast_id  bigint NOT NULL,
    subscriber_id bigint NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('hard', 'soft', 'policy', 'complaint')),
    email         text NOT NULL,
    finding_id    bigint REFERENCES bounce_findings (id) ON DELETE SET NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (broadcast_id, subscriber_id, kind)
);
CREATE INDEX bounce_effects_soft ON bounce_effects (lower(email), created_at)
    WHERE kind = 'soft';

-- A sent job that bounced later: when, and the first kind reported (never moved after).
ALTER TABLE broadcast_jobs ADD COLUMN bounced_at timestamptz,
                           ADD COLUMN bounce_kind text
    CHECK (bounce_kind IN ('hard', 'soft', 'policy', 'complaint'));
