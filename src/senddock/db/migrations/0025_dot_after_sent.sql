-- Issue 23: a final dot's mark rides on the outcome of the message before it, when that one
-- was sent. Until 0024 every mark (jobs.sql record_and_mark) was one more version of its own
-- job's row between its claim and its outcome: in Postgres 15 about 23 µs of the outcome
-- statement and 127 bytes of WAL a message, as much as an outcome's own row
-- (pg_stat_statements over bench/ab.py, 2x5 workers on 127.0.0.1), and the whole of issue 23's
-- cost to the drain rate. A session's next dot waits for the commit of its previous outcome
-- anyway (invariant 3); when that outcome is `sent`, its row now names the job whose dot goes
-- next (`next_dot`) and the relay (`next_relay`), and that job's row is not written at all.
--
-- Only on a `sent` row: nothing ever writes a sent job's row again (no claim, no outcome, no
-- retry-failed takes it), so the mark it carries can never be overwritten while its dot is in
-- flight. After any other outcome the mark is written on the job's own row, as before.
-- A rescue finds the marks of a dead owner's jobs through the index below; the index holds
-- only rows that carry a mark, and an outcome already writes an entry in every index of the
-- table (a status change is never a HOT update), so one more entry is what the mark costs.
ALTER TABLE broadcast_jobs ADD COLUMN next_dot bigint, ADD COLUMN next_relay text;
CREATE INDEX broadcast_jobs_next_dot ON broadcast_jobs (next_dot) WHERE next_dot IS NOT NULL;

-- The mark a job's session's previous outcome carries for it, if any: its time (that
-- outcome's commit) and relay. Only one written by the same owner after the job's claim counts,
-- so a mark from an earlier claim of the job (given back, claimed again) never does. The one
-- lookup behind the rescue, the read-back after a lost commit and an `unconfirmed` outcome's
-- time and relay (queue/jobs.sql).
CREATE FUNCTION senddock_carried_mark(job_id bigint, job_owner bigint, claimed timestamptz)
RETURNS TABLE (at timestamptz, relay text) LANGUAGE sql STABLE AS $$
    SELECT p.updated_at, p.next_relay FROM broadcast_jobs p
    WHERE p.next_dot = job_id AND p.owner = job_owner AND p.updated_at > claimed
    ORDER BY p.updated_at DESC
    LIMIT 1
$$;
