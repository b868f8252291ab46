-- 0015: what a bounce or complaint that came back after the 250 does (issue 21). The effects
-- are applied by senddock/queue/bounces.py in the same transaction as the finding's row.

-- The job's record of its first later report (first report wins: set only while NULL).
ALTER TABLE broadcast_jobs
    ADD COLUMN bounced_at  timestamptz,
    ADD COLUMN bounce_kind text CHECK (bounce_kind IN ('hard', 'soft', 'policy', 'complaint'));

-- Each job is counted once per kind of later report, however many reports name it (two DSNs
-- about one message, a DSN and a complaint count once each). A row here is the proof that
-- broadcast_counts state 'later:<kind>' was incremented for it; no foreign key to the job,
-- which retention may delete while reports still arrive.
CREATE TABLE bounce_effects (
    broadcast_id  bigint NOT NULL,
    subscriber_id bigint NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('hard', 'soft', 'policy', 'complaint')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (broadcast_id, subscriber_id, kind)
);

-- The soft-bounce rule counts a subscriber's soft reports of the last days.
CREATE INDEX bounce_findings_subscriber ON bounce_findings (subscriber_id, created_at)
    WHERE subscriber_id IS NOT NULL AND kind = 'soft';
