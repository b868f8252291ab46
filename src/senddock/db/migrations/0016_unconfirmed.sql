-- 0016: no recipient sent to twice, literally (issue 23). A job whose final dot went and whose
-- outcome is unknown (its worker died, the connection dropped before the dot's reply, RFC 1047)
-- is `unconfirmed`: the relay probably accepted it, so it is never resent on its own; a person
-- resends it (`campaign resend-unconfirmed`) or confirms it (`campaign confirm`). To tell it
-- from a job whose dot never went, the sender writes, in the commit that records the previous
-- outcome of its session (invariant 3), that this job's dot is about to go: `dot_at` and the
-- relay. The owner that sent it stays in `owner` (its worker id: never reused), so a late 250
-- of a worker cut off beyond its lease still lands (jobs.sql, record_many).
-- The counters of 0010 count `unconfirmed` under its own name (senddock_count_state); the
-- claimable and held partial indexes do not include it: an unconfirmed job is neither.
ALTER TABLE broadcast_jobs DROP CONSTRAINT broadcast_jobs_status_check;
ALTER TABLE broadcast_jobs ADD CONSTRAINT broadcast_jobs_status_check
    CHECK (status IN ('pending', 'sending', 'retry', 'sent', 'failed', 'cancelled',
                      'unconfirmed'));

-- When the final dot of this claim (attempt `attempts`) was about to go; NULL: it never did.
-- A claim clears it, so a value always belongs to the current attempt.
ALTER TABLE broadcast_jobs ADD COLUMN dot_at timestamptz;
-- The relay (its SENDDOCK_SMTP_URL name) that dot went to.
ALTER TABLE broadcast_jobs ADD COLUMN dot_relay text;

-- The unconfirmed jobs of a broadcast, for `campaign status`, the dashboard and the two
-- commands: empty but after a crash, so it costs nothing to keep.
CREATE INDEX broadcast_jobs_unconfirmed ON broadcast_jobs (broadcast_id, dot_at)
    WHERE status = 'unconfirmed';
