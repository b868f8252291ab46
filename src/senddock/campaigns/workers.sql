-- Is anyone there to send? (campaigns/workers.py; liveness itself is delivery/rescuer.py's.)

-- name: live
-- Invariant 5's clock: a worker is counted live while its heartbeat, on the database clock
-- (senddock_heartbeat_age, the rescuer's), is younger than the lease and it is not stopping.
SELECT count(*) AS n FROM workers
WHERE NOT stopping AND senddock_heartbeat_age(heartbeat_at) <= %(lease)s
