-- 0002: a campaign can be cancelled; its unsent jobs become `cancelled` (a final state).
ALTER TABLE broadcast_jobs DROP CONSTRAINT broadcast_jobs_status_check;
ALTER TABLE broadcast_jobs ADD CONSTRAINT broadcast_jobs_status_check
    CHECK (status IN ('pending', 'sending', 'retry', 'sent', 'failed', 'cancelled'));
