-- Is anyone there to send? (campaigns/workers.py; liveness itself is delivery/rescuer.py's.)

-- name: live
-- Invariant 5's clock: a worker is counted live while its heartbeat, on the database clock, is
-- younger than the lease and it is not stopping.
SELECT count(*) AS n FROM workers
WHERE NOT stopping AND now() - heartbeat_at <= make_interval(secs => %(lease)s)
