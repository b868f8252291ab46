-- 0008: one recipient's data never costs another recipient an attempt (issue 18).
-- A process that dies (SIGKILL, OOM, a crash) cannot say which of the jobs it held killed it.
-- Its jobs are rescued as *suspects*: the attempt given back (most were never started), the
-- death counted on the job. A suspect is claimed only as its process's one suspect at a time,
-- beside ordinary jobs; a process that dies holding a suspect that way charges that suspect
-- alone (`alone_deaths`), and one charged twice fails as rejected, so a job that kills every
-- worker that takes it stops after three deaths instead of retrying forever (invariant 2's
-- reason), and nobody else is charged anything. See senddock/queue/jobs.sql, rescue.

-- Times a worker died while holding this job.
ALTER TABLE broadcast_jobs ADD COLUMN deaths smallint NOT NULL DEFAULT 0;
-- Of those, deaths while it was its process's one suspect.
ALTER TABLE broadcast_jobs ADD COLUMN alone_deaths smallint NOT NULL DEFAULT 0;
-- This claim took it as its process's one suspect.
ALTER TABLE broadcast_jobs ADD COLUMN suspect_claim boolean NOT NULL DEFAULT false;

-- Claimable suspects only: empty but for a moment after a crash, so looking costs nothing.
CREATE INDEX broadcast_jobs_suspects ON broadcast_jobs (run_at)
    WHERE status IN ('pending', 'retry') AND deaths > 0;

-- Why a live worker process stopped being one, as its supervisor or its own last words said
-- (an exit code, a signal, an exception); kept for the death record its rescuer writes.
ALTER TABLE workers ADD COLUMN exit_reason text;

-- Every worker process found dead (or that stopped on an error it could not outlast), with
-- what it held: `campaign status`, the dashboard and /metrics show them.
CREATE TABLE worker_deaths (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    worker_id      bigint NOT NULL,
    host           text NOT NULL,
    pid            integer NOT NULL,
    started_at     timestamptz NOT NULL,
    last_heartbeat timestamptz NOT NULL,
    found_at       timestamptz NOT NULL DEFAULT now(),
    reason         text NOT NULL,
    jobs_held      integer NOT NULL,
    broadcast_ids  bigint[] NOT NULL DEFAULT '{}'
);
CREATE INDEX worker_deaths_broadcasts ON worker_deaths USING gin (broadcast_ids);
CREATE INDEX worker_deaths_host_pid ON worker_deaths (host, pid, found_at);
