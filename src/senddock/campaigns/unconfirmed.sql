-- The statements of campaigns/unconfirmed.py (issue 41, item 3): the unconfirmed jobs of every
-- campaign at once. Both read the partial index broadcast_jobs_unconfirmed (0017: only the
-- unconfirmed rows, none but after a crash), so a dashboard page pays one empty index probe on
-- a quiet queue. The counts are the queue's (queue/counts.py); the jobs and what each source
-- said are the queue's statements (queue/jobs.sql: unconfirmed_jobs, reconcile_notes).

-- name: snapshot
-- Invariant 8: the campaigns, their counts, their jobs and the set the one action names are
-- read in one snapshot, so the page's numbers agree with each other and with its form.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ

-- name: waiting
-- The campaigns with an unconfirmed job, newest first (as the campaign list orders them), with
-- what a page names them by. Archived and cancelled ones too: their jobs still wait for a
-- person (a cancelled campaign's to be confirmed, never resent).
SELECT c.id, c.name, c.subject, c.status, c.broadcast_id
FROM campaigns c
WHERE c.broadcast_id IN (
    SELECT j.broadcast_id FROM broadcast_jobs j WHERE j.status = 'unconfirmed')
ORDER BY c.id DESC

-- name: resendable
-- The unconfirmed jobs a person may resend, by campaign, in campaign order (the order the one
-- action locks them in): those of a campaign sending or paused. A cancelled campaign's
-- recipients are never sent again (campaigns/recipients.py refuses it), so they are not in
-- the set the button counts. The ids, not a count: the action resends exactly these.
SELECT c.id AS campaign_id, c.status, array_agg(j.id ORDER BY j.id) AS ids
FROM broadcast_jobs j JOIN campaigns c ON c.broadcast_id = j.broadcast_id
WHERE j.status = 'unconfirmed' AND c.status IN ('sending', 'paused')
GROUP BY c.id, c.status
ORDER BY c.id
