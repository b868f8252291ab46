-- 0027: why a later bounce failed, not only its kind (issue 34). Each finding keeps its reason
-- (bounces/classify.py: userunknown, mailboxfull, requireptr, …; the kind follows from it by
-- one table), and so do the job's record of its first later report and the suppression a
-- report made, so a person can see why an address was removed (a later bounce removes it for
-- good). Additive: rows written before it have no reason (NULL), and a worker of the previous
-- version, which writes no reason, keeps running while it applies. The reason is a word of
-- lower-case letters: the taxonomy may grow without a migration.
ALTER TABLE bounce_findings
    ADD COLUMN reason text CHECK (reason ~ '^[a-z]{1,40}$');
ALTER TABLE broadcast_jobs
    ADD COLUMN bounce_reason text CHECK (bounce_reason ~ '^[a-z]{1,40}$');
ALTER TABLE suppressions
    ADD COLUMN bounce_reason text CHECK (bounce_reason ~ '^[a-z]{1,40}$');
