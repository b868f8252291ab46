-- 0017: a final dot's mark (issue 23, jobs.sql mark_dots) is a HOT update again. 0016 indexed
-- the unconfirmed jobs by (broadcast_id, dot_at): any index naming `dot_at` makes every update
-- of it a new row version with a new entry in each of broadcast_jobs's indexes (the primary
-- key, broadcast_jobs_once, broadcast_jobs_sending), once a message. Measured with
-- bench/queue_cost.py --marks both (20,000 jobs, groups of 4): the marks cost Postgres 33 µs
-- of CPU and 324 bytes of WAL a message with that index. Without `dot_at` in any index the mark
-- stays on its page (fillfactor 80, 0001) and writes no index; the few unconfirmed jobs of a
-- broadcast are sorted by `dot_at` when they are read (jobs.sql, unconfirmed_jobs).
DROP INDEX broadcast_jobs_unconfirmed;
CREATE INDEX broadcast_jobs_unconfirmed ON broadcast_jobs (broadcast_id)
    WHERE status = 'unconfirmed';
