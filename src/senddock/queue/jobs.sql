-- The queue's statements: every one that changes a job's, a broadcast's or a campaign's status,
-- and the reads those transitions need under their locks. The state diagram is in jobs.py's
-- docstring; each arrow there names the block here that makes it. Invariant numbers are those of
-- docs/design.md. A campaign's status is never written here while it has a broadcast: the trigger
-- campaign_follows_broadcast (migration 0013) derives it from the broadcast's.
--
-- Relies on these triggers and functions (each in db/schema.sql; tests/test_schema_file.py
-- checks that every one named here exists there):
--   trigger campaign_follows_broadcast (0013): a campaign's status follows its broadcast's.
--   function campaign_status_of (0013): the broadcast status -> campaign status map it applies.
--   trigger broadcast_jobs_count_inserts (0010): enqueue counts its jobs in its transaction.
--   trigger broadcast_jobs_count_updates (0010): every transition moves the counts with it.
--   function senddock_count_state (0010): the counted state of a job's status and failure.
--   trigger subscribers_delete_guard (0006): the exclusive side of chunk_lock.
--   function senddock_carried_mark (0025): a rescued row's carried mark (record_many).
--   function senddock_unfinished (0026): the one "unfinished" that finish reads.

-- ===== Enqueue: a draft becomes a broadcast, its recipients become pending jobs =====

-- name: lock_campaign
-- The campaign, row-locked for the caller's transaction: every transition of a campaign
-- (send, pause, resume, cancel, retry-failed, schedule) starts here, so two of them on one
-- campaign take turns and each judges the status the other left.
SELECT id, from_addr, status, broadcast_id FROM campaigns WHERE id = %(c)s FOR UPDATE

-- name: broadcast_total
-- The jobs a broadcast has so far (sending a campaign twice answers with its one broadcast).
SELECT total FROM broadcasts WHERE id = %(b)s

-- name: new_broadcast
-- Invariant 7: one broadcast per campaign (unique campaign_id). It starts `running`; the
-- trigger campaign_follows_broadcast moves its campaign from draft to sending in this statement.
-- Its audience filter (a segment's, migration 0021) is fixed here for every chunk.
-- (message_token, the per-broadcast token of Message-IDs before 0028, is no longer written.)
INSERT INTO broadcasts (campaign_id, total, message_domain, audience_filter)
VALUES (%(c)s, 0, %(domain)s, %(filter)s) RETURNING id

-- name: last_subscriber
-- The recipients are fixed now: nobody who signs up after this moment is swept in.
SELECT coalesce(max(id), 0) AS last FROM subscribers

-- name: new_enqueue
-- Invariant 7: the enqueue cursors, one per part of the id range, committed with the broadcast;
-- while any is left the broadcast cannot finish (finish).
INSERT INTO broadcast_enqueues (broadcast_id, part, after_id, last_id, since)
SELECT %(b)s, k, %(last)s * k / %(parts)s, %(last)s * (k + 1) / %(parts)s, now()
FROM generate_series(0, %(parts)s - 1) k

-- name: link_broadcast
-- The campaign names its broadcast (its status already follows it: new_broadcast).
UPDATE campaigns SET broadcast_id = %(b)s, updated_at = now() WHERE id = %(c)s

-- name: take_enqueue
-- One part of a broadcast still being enqueued, its row locked for this chunk. SKIP LOCKED: a
-- worker is enqueuing that part already, take another or come back later. With it, the key
-- of the Message-IDs' per-recipient token (migration 0028).
SELECT e.broadcast_id, e.part, e.after_id, e.last_id, e.since, b.campaign_id, b.status,
       b.message_domain, b.audience_filter,
       (SELECT value FROM app_secrets WHERE name = 'message_id_key') AS message_key
FROM broadcast_enqueues e JOIN broadcasts b ON b.id = e.broadcast_id
WHERE %(b)s::bigint IS NULL OR e.broadcast_id = %(b)s
ORDER BY e.broadcast_id, e.part
LIMIT 1
FOR NO KEY UPDATE OF e SKIP LOCKED

-- name: campaign_lists
-- The lists a campaign sends to (a chunk's jobs are their confirmed members).
SELECT list_id FROM campaign_lists WHERE campaign_id = %(c)s

-- name: chunk_lock
-- Held shared by every chunk; a subscriber delete takes it exclusively (migration 0006,
-- subscribers_delete_guard), so a chunk never enqueues a subscriber being deleted.
SELECT pg_advisory_xact_lock_shared(%(key)s, %(sub)s)

-- name: chunk_without_jit
-- Compiling costs more than it saves per chunk.
SET LOCAL jit = off

-- name: chunk_without_nestloop
-- A chunk is a bulk join over one id range: hash and merge joins are linear whatever the
-- statistics say. With stale ones (a list imported a moment ago) the planner may pick a nested
-- loop over a scan, quadratic in the chunk (seen: minutes for 50,000).
SET LOCAL enable_nestloop = off

-- name: chunk_end
-- Where this chunk ends: `n` memberships past the cursor on each of the campaign's lists (read
-- from the membership key, list_id then subscriber_id), the nearest of those; past the last of
-- every list, the snapshot bound.
SELECT least(%(last)s::bigint, min(k.sid)) AS hi
FROM campaign_lists cl
CROSS JOIN LATERAL (
    SELECT m.subscriber_id AS sid FROM list_memberships m
    WHERE m.list_id = cl.list_id AND m.subscriber_id > %(after)s
    ORDER BY m.subscriber_id OFFSET %(n)s - 1 LIMIT 1
) k
WHERE cl.campaign_id = %(c)s

-- name: enqueue
-- Invariant 7: one pending job per distinct (one subscriber per address), active,
-- non-suppressed address that is confirmed on any of the campaign's lists, for subscriber ids
-- in (after, hi]. The Message-ID is fixed here, so every attempt of the job carries the same one
-- (invariant 9); its token is HMAC-SHA256 over "broadcast.subscriber" with the Message-ID key,
-- made from the key's padded forms `ikey`, `okey` (bounces/verp.py): a recipient cannot make
-- another's, so a report quoting it is about that job (invariant 10). Two sha256() a row cost
-- about what bench/enqueue.py shows (docs/bounce-forgery-2026-12-07.md). The range is spelled on both tables so each is read through its key, not
-- scanned. Chunks never overlap (each part's range is its own, its cursor moves with its jobs,
-- its row is locked while a chunk runs), so a job that exists already is never expected; the
-- unique key still refuses one. Plain, the insert costs about a quarter less than with ON
-- CONFLICT (speculative insertion writes a WAL record more a row): it goes plain, in a
-- savepoint, and only if the key refuses a row is the chunk inserted again with ON CONFLICT
-- DO NOTHING (jobs.py ENQUEUE_SKIPPING: this statement, not a copy of it). `{audience}` is the
-- broadcast's segment filter over `s` (audience/segment_filter.py: placeholders only; `true`
-- without one), so a segment narrows the same one set-based pass.
INSERT INTO broadcast_jobs (broadcast_id, subscriber_id, email, message_id)
SELECT %(b)s::bigint, s.id, s.email,
       '<sd.' || %(b)s::bigint || '.' || s.id || '.'
       || encode(substr(sha256(%(okey)s::bytea
                               || sha256(%(ikey)s::bytea || (%(b)s::bigint || '.' || s.id)::bytea)),
                        1, 16), 'hex')
       || '@' || %(domain)s::text || '>'
FROM subscribers s
WHERE s.id > %(after)s AND s.id <= %(hi)s AND s.status = 'active'
  AND s.id IN (SELECT m.subscriber_id FROM list_memberships m
               WHERE m.list_id = ANY(%(lists)s::bigint[])
                 AND m.subscriber_id > %(after)s AND m.subscriber_id <= %(hi)s
                 AND m.status = 'confirmed' AND m.created_at <= %(since)s)
  AND NOT EXISTS (SELECT 1 FROM suppressions x WHERE lower(x.email) = lower(s.email))
  AND {audience}

-- name: advance_enqueue
-- Invariant 7: the cursor moves in the chunk's transaction, with its jobs.
UPDATE broadcast_enqueues SET after_id = %(hi)s, chunks = chunks + 1, updated_at = now()
WHERE broadcast_id = %(b)s AND part = %(part)s

-- name: enqueue_done
-- Invariant 8: the last chunk of a part (or a cancel) deletes its cursor; with none left the
-- broadcast may finish.
DELETE FROM broadcast_enqueues WHERE broadcast_id = %(b)s AND part = %(part)s

-- name: add_total
-- Last in the chunk, so the row lock is short: a cancel that committed meanwhile is seen here
-- (the chunk is then rolled back); one that comes later waits for this commit and cancels the
-- chunk's jobs with the rest.
UPDATE broadcasts SET total = total + %(n)s WHERE id = %(b)s RETURNING status

-- name: anyone_left
-- Is anyone left to send to past the cursor? (Only asked when the first chunk found nobody:
-- a campaign with nobody to send to is refused rather than finished empty.) Narrowed by the
-- same `{audience}` as enqueue.
SELECT EXISTS (
    SELECT 1 FROM subscribers s
    WHERE s.id > %(after)s AND s.id <= %(last)s AND s.status = 'active'
      AND s.id IN (SELECT m.subscriber_id FROM list_memberships m
                   WHERE m.list_id = ANY(%(lists)s::bigint[]) AND m.subscriber_id > %(after)s
                     AND m.status = 'confirmed' AND m.created_at <= now())
      AND NOT EXISTS (SELECT 1 FROM suppressions x WHERE lower(x.email) = lower(s.email))
      AND {audience}
) AS found

-- name: analyze_jobs
-- The claim's plan depends on broadcast_jobs' statistics. Autovacuum notices many new rows
-- only at its next pass (up to a minute): meanwhile the planner, believing the table small,
-- walks the whole broadcast on every claim (measured: 9 ms a claim at 20,000 jobs, not 0.3 ms).
ANALYZE broadcast_jobs

-- name: wake
-- Enqueue, resume and retry-failed wake idle workers (they LISTEN instead of polling hard);
-- pause and cancel send `stop:<broadcast>` so workers give back claims they have not started.
-- Sent at commit, so a worker that wakes sees the rows.
SELECT pg_notify(%(channel)s, %(payload)s)

-- ===== Claim and outcome: pending|retry -> sending -> sent|retry|failed =====

-- name: claim
-- Invariant 2: one statement claims; the CTE locks at most n rows (LIMIT inside the locking
-- SELECT), counts the attempt at claim, and commits before anything is sent. A job whose
-- address was suppressed after enqueue fails here as suppressed and is never sent.
-- The limit is written into the statement by `claim_sql` (this is only its template), not
-- bound: with `LIMIT $1` the generic plan must guess the limit, and past about 100,000
-- claimable jobs Postgres never adopts it and plans every claim anew (about a millisecond); a
-- fixed limit lets it keep one plan (tests/test_claim_plan.py).
-- Ordinary jobs are those no dead worker held (`deaths = 0`). A process that holds no suspect
-- also takes at most one suspect (`{suspects}` is 1 or 0), through their own partial index:
-- one at a time, so that if the process dies again, rescue can charge that one job alone.
WITH suspect AS (
    SELECT j.id, true AS suspect
    FROM broadcast_jobs j
    JOIN broadcasts b ON b.id = j.broadcast_id
    WHERE j.status IN ('pending', 'retry') AND j.deaths > 0 AND j.run_at <= now()
      AND b.status = 'running'
    ORDER BY j.run_at
    LIMIT {suspects}
    FOR UPDATE OF j SKIP LOCKED
), ordinary AS (
    SELECT j.id, false AS suspect
    FROM broadcast_jobs j
    JOIN broadcasts b ON b.id = j.broadcast_id
    WHERE j.status IN ('pending', 'retry') AND j.deaths = 0 AND j.run_at <= now()
      AND b.status = 'running'
    ORDER BY j.run_at
    LIMIT {n}
    FOR UPDATE OF j SKIP LOCKED
), picked AS (
    SELECT p.id, p.suspect, EXISTS (
               SELECT 1 FROM suppressions s WHERE lower(s.email) = lower(j.email)
           ) AS suppressed
    FROM (SELECT * FROM suspect UNION ALL SELECT * FROM ordinary) p
    JOIN broadcast_jobs j ON j.id = p.id
), claimed AS (
    UPDATE broadcast_jobs j
    SET status        = CASE WHEN p.suppressed THEN 'failed' ELSE 'sending' END,
        failure       = CASE WHEN p.suppressed THEN 'suppressed' END,
        attempts      = j.attempts + CASE WHEN p.suppressed THEN 0 ELSE 1 END,
        suspect_claim = p.suspect AND NOT p.suppressed,
        owner         = %(owner)s,
        claimed_at    = now(),
        dot_at        = NULL,
        dot_relay     = NULL,
        updated_at    = now()
    FROM picked p
    WHERE j.id = p.id
    RETURNING j.id, j.broadcast_id, j.subscriber_id, j.email, j.status, j.attempts,
              j.sender_faults, j.message_id, j.suspect_claim
)
SELECT c.id, c.broadcast_id, c.email, s.name, s.attributes::text AS attributes, c.attempts,
       c.sender_faults, c.message_id, c.subscriber_id, c.suspect_claim AS suspect
FROM claimed c JOIN subscribers s ON s.id = c.subscriber_id
WHERE c.status = 'sending'
ORDER BY c.id

-- name: record_many
-- Invariants 3 and 4 with group commit: the outcomes of many sessions in one statement, each
-- row fenced by its claim: still `sending`, for this owner, at this attempt. Only the rows
-- returned were written. A row a peer rescued as `unconfirmed` while we were cut off from the
-- database (same owner and attempt: rescue keeps both) takes our outcome too, so a 250 that
-- came late is never lost.
-- An outcome `unconfirmed` (the dot went, no reply: RFC 1047) keeps its owner, like the rest,
-- and shows when and to which relay its dot went (its mark: its own row's, or the one the
-- previous outcome of its session carried).
-- A `sent` outcome may carry the mark of the next dot of its session (`next`, 0025): the job's
-- id and relay, written on this row instead of that job's, only while that job is still our
-- `sending` claim at its attempt (RETURNING says whether it was written). While this row is
-- itself still our `sending` claim, no rescue took our jobs (a rescue takes every job of a
-- dead owner in one statement, and a buried owner never claims again), so the next job is
-- ours too and nothing is looked up: the common case costs nothing (a lookup per outcome
-- cost about 8 % of the drain, bench/ab.py). Only a late 250 landing on a row a rescue made
-- `unconfirmed` (owner kept) looks the next job up by primary key, fenced as mark_dots fences
-- a mark: that job went back to retry, maybe to another worker, and its mark must not land
-- (issue 33: found by tests/test_queue_model.py).
-- Every fence value (owner, attempt, the `sending` it was claimed into) comes with its row, so
-- the primary key is the only index that can find the rows: fenced by constants, the planner
-- read every row this process holds through broadcast_jobs_sending and hashed them, for each
-- group (a third of the statement's cost with 250 claims held).
UPDATE broadcast_jobs j
SET status        = r.status,
    failure       = r.failure,
    attempts      = j.attempts - r.give_back,
    sender_faults = j.sender_faults + r.sender_fault,
    run_at        = now() + make_interval(secs => r.delay),
    sent_at       = CASE WHEN r.status = 'sent' THEN now() END,
    last_code     = r.code,
    last_enhanced = r.enhanced,
    last_reply    = r.reply,
    last_stage    = r.stage,
    next_dot      = CASE WHEN j.status = r.held THEN r.next
                         ELSE (SELECT n.id FROM broadcast_jobs n
                               WHERE n.id = r.next AND n.owner = r.owner
                                 AND n.attempts = r.next_attempt AND n.status = r.held) END,
    next_relay    = CASE WHEN r.next IS NULL THEN NULL
                         WHEN j.status = r.held THEN r.next_relay
                         WHEN EXISTS (SELECT n.id FROM broadcast_jobs n
                               WHERE n.id = r.next AND n.owner = r.owner
                                 AND n.attempts = r.next_attempt AND n.status = r.held)
                         THEN r.next_relay END,
    dot_at        = CASE WHEN r.status = 'unconfirmed'
                         THEN coalesce(j.dot_at, (SELECT c.at FROM senddock_carried_mark(
                                                      j.id, j.owner, j.claimed_at) c), now())
                         ELSE j.dot_at END,
    dot_relay     = CASE WHEN r.status = 'unconfirmed'
                         THEN coalesce(j.dot_relay, (SELECT c.relay FROM senddock_carried_mark(
                                                         j.id, j.owner, j.claimed_at) c))
                         ELSE j.dot_relay END,
    updated_at    = now()
FROM jsonb_to_recordset(%(outcomes)s::jsonb)
     AS r(id bigint, owner int, held text, attempt int, status text, failure text,
          give_back int, sender_fault int, delay float8, code int, enhanced text, reply text,
          stage text, next bigint, next_relay text, next_attempt int)
WHERE j.id = r.id AND j.owner = r.owner AND j.attempts = r.attempt
  AND (j.status = r.held OR j.status = 'unconfirmed')
RETURNING j.id, j.next_dot

-- name: mark_dots
-- Invariant 3, and issue 23: these jobs' final dots are about to go. Written in the commit of
-- the previous outcome of each one's session when that is still waiting (jobs.py
-- record_and_mark: record_many and this statement in one), alone otherwise; the dot waits for
-- it. A rescue then knows the job may have been accepted (rescue: unconfirmed, never resent on
-- its own). Fenced like an outcome (invariant 4): a row not returned lost its claim, and its
-- dot must not go. By primary key, as record_many.
UPDATE broadcast_jobs j
SET dot_at = now(), dot_relay = d.relay
FROM jsonb_to_recordset(%(dots)s::jsonb) AS d(id bigint, owner int, attempt int, relay text)
WHERE j.id = d.id AND j.owner = d.owner AND j.attempts = d.attempt AND j.status = 'sending'
RETURNING j.id

-- name: record_and_mark
-- record_many and mark_dots in one statement, for a group that has both (the common group
-- once senders mark their dots, issue 23): each row is an outcome (`dot` false: set as
-- record_many sets it) or a mark (`dot` true: only dot_at and dot_relay, as mark_dots). One
-- statement instead of two in a CTE: one scan of the parameter, one firing of the counters'
-- statement trigger (0010), which a mark never changes (it stays `sending`). Same fences:
-- an outcome as record_many's (an `unconfirmed` row of ours takes a late 250), a mark only on
-- a `sending` claim of ours at this attempt, a carried mark as record_many's (looked up only
-- under a row a rescue made `unconfirmed`). By primary key, as record_many.
UPDATE broadcast_jobs j
SET status        = CASE WHEN r.dot THEN j.status ELSE r.status END,
    failure       = CASE WHEN r.dot THEN j.failure ELSE r.failure END,
    attempts      = j.attempts - CASE WHEN r.dot THEN 0 ELSE r.give_back END,
    sender_faults = j.sender_faults + CASE WHEN r.dot THEN 0 ELSE r.sender_fault END,
    run_at        = CASE WHEN r.dot THEN j.run_at ELSE now() + make_interval(secs => r.delay) END,
    sent_at       = CASE WHEN r.dot THEN j.sent_at WHEN r.status = 'sent' THEN now() END,
    last_code     = CASE WHEN r.dot THEN j.last_code ELSE r.code END,
    last_enhanced = CASE WHEN r.dot THEN j.last_enhanced ELSE r.enhanced END,
    last_reply    = CASE WHEN r.dot THEN j.last_reply ELSE r.reply END,
    last_stage    = CASE WHEN r.dot THEN j.last_stage ELSE r.stage END,
    updated_at    = CASE WHEN r.dot THEN j.updated_at ELSE now() END,
    next_dot      = CASE WHEN r.dot THEN j.next_dot
                         WHEN j.status = r.held THEN r.next
                         ELSE (SELECT n.id FROM broadcast_jobs n
                               WHERE n.id = r.next AND n.owner = r.owner
                                 AND n.attempts = r.next_attempt AND n.status = r.held) END,
    next_relay    = CASE WHEN r.dot THEN j.next_relay
                         WHEN r.next IS NULL THEN NULL
                         WHEN j.status = r.held THEN r.next_relay
                         WHEN EXISTS (SELECT n.id FROM broadcast_jobs n
                               WHERE n.id = r.next AND n.owner = r.owner
                                 AND n.attempts = r.next_attempt AND n.status = r.held)
                         THEN r.next_relay END,
    dot_at        = CASE WHEN r.dot THEN now()
                         WHEN r.status = 'unconfirmed'
                         THEN coalesce(j.dot_at, (SELECT c.at FROM senddock_carried_mark(
                                                      j.id, j.owner, j.claimed_at) c), now())
                         ELSE j.dot_at END,
    dot_relay     = CASE WHEN r.dot THEN r.relay
                         WHEN r.status = 'unconfirmed'
                         THEN coalesce(j.dot_relay, (SELECT c.relay FROM senddock_carried_mark(
                                                         j.id, j.owner, j.claimed_at) c))
                         ELSE j.dot_relay END
FROM jsonb_to_recordset(%(rows)s::jsonb)
     AS r(id bigint, owner int, held text, attempt int, status text, failure text,
          give_back int, sender_fault int, delay float8, code int, enhanced text, reply text,
          stage text, next bigint, next_relay text, next_attempt int, dot bool, relay text)
WHERE j.id = r.id AND j.owner = r.owner AND j.attempts = r.attempt
  AND (j.status = r.held OR (NOT r.dot AND j.status = 'unconfirmed'))
RETURNING j.id, r.dot, j.next_dot

-- name: suppress_bounces
-- Invariant 6 for a group: the bounces among the rows just written, in the same transaction.
INSERT INTO suppressions (email, reason, source_broadcast_id, detail)
SELECT email, 'bounce', broadcast_id, detail
FROM unnest(%(emails)s::text[], %(broadcast_ids)s::bigint[], %(details)s::text[])
     AS b(email, broadcast_id, detail)
ON CONFLICT ((lower(email))) DO NOTHING

-- name: tag_all_bounced
-- Invariant 6: a bounced address's subscriber is marked bounced with its suppression.
UPDATE subscribers SET status = 'bounced', updated_at = now()
WHERE lower(email) = ANY(%(lowered)s::text[]) AND status = 'active'

-- name: read_back_many
-- Invariant 4: after a group commit whose reply was lost, which of its rows landed (a dot's
-- mark landed if `dot_at` is set, which a claim clears, or if a row of this owner written since
-- the claim carries it as `next_dot`).
SELECT j.id, j.status, j.owner, j.attempts,
       j.dot_at IS NOT NULL
       OR EXISTS (SELECT 1 FROM senddock_carried_mark(j.id, j.owner, j.claimed_at)) AS dotted
FROM broadcast_jobs j WHERE j.id = ANY(%(ids)s::bigint[])

-- name: release
-- Claims this process holds but never started (shutdown, a pause or cancel's `stop:`): back to
-- where they were, the attempt given back; a cancelled broadcast's are cancelled at once (so a
-- cancel that waits for its broadcast's claims to come back counts them as cancelled, not
-- pending until finish). Fenced like an outcome (invariant 4).
UPDATE broadcast_jobs j
SET status     = CASE WHEN b.status = 'cancelled' THEN 'cancelled'
                      WHEN j.attempts - 1 = 0 THEN 'pending' ELSE 'retry' END,
    attempts   = j.attempts - 1,
    owner      = NULL,
    run_at     = now(),
    updated_at = now()
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[]) AS r(id, attempt), broadcasts b
WHERE j.id = r.id AND j.owner = %(owner)s AND j.attempts = r.attempt AND j.status = 'sending'
  AND b.id = j.broadcast_id

-- name: release_orphans
-- Claims of this owner that no sender holds (a claim whose commit reply was lost): released
-- like release, since none of them was started.
UPDATE broadcast_jobs j
SET status     = CASE WHEN b.status = 'cancelled' THEN 'cancelled'
                      WHEN j.attempts - 1 = 0 THEN 'pending' ELSE 'retry' END,
    attempts   = j.attempts - 1,
    owner      = NULL,
    run_at     = now(),
    updated_at = now()
FROM broadcasts b
WHERE j.owner = %(owner)s AND j.status = 'sending' AND NOT (j.id = ANY(%(held)s::bigint[]))
  AND b.id = j.broadcast_id

-- name: rescue
-- Invariant 5: only jobs of owners known dead are rescued. A job whose final dot was about to
-- go (its mark: `dot_at` on its row, or `next_dot` on its session's previous outcome, written
-- with that outcome: record_many, record_and_mark) may have been
-- accepted: with `hold` (SENDDOCK_UNCONFIRMED, the default) it becomes `unconfirmed`, its
-- attempt spent, its owner kept (a late outcome of a worker that was only cut off still lands:
-- record_many), and waits for a person (resend_unconfirmed, confirm). At most one a session.
-- The others were never past their envelope. Which of them killed the process
-- (if one did) is unknown, and most were never started: each goes back to retry (it may have
-- been sent, so it is not pending) with its attempt given back and the death counted
-- (`deaths`): a suspect from now on, claimed one at a time a process (claim). The one a process
-- held as its suspect is charged the death alone (`alone_deaths`); charged SUSPECT_DEATHS times
-- it fails as rejected, never tried again, so a job that kills every worker that takes it
-- cannot retry forever (invariant 2's reason), and no other job pays.
-- A dead owner whose dot log was read (`logged`, delivery/dotlog.py: it ran on the rescuer's
-- host) names the (job, attempt) of each final dot it was about to write (`went_*`): a marked
-- job of its not named there never had its dot written, and goes back as the unmarked do.
WITH dead AS (
    SELECT j.id, m.marked AND %(hold)s AND NOT m.never_went AS dotted, m.never_went,
           coalesce(j.dot_at, c.at) AS dot_at, coalesce(j.dot_relay, c.relay) AS dot_relay,
           j.suspect_claim AND j.alone_deaths + 1 >= %(alone_limit)s AS poison
    FROM broadcast_jobs j
    -- A mark carried by the previous outcome of the job's session (a `sent` row of the same
    -- owner written since this claim: a mark from an earlier claim does not count).
    LEFT JOIN LATERAL senddock_carried_mark(j.id, j.owner, j.claimed_at) c ON true
    CROSS JOIN LATERAL (SELECT j.dot_at IS NOT NULL OR c.at IS NOT NULL AS marked) k
    CROSS JOIN LATERAL (
        SELECT k.marked,
               k.marked AND j.owner = ANY(%(logged)s::bigint[]) AND NOT EXISTS (
                   SELECT 1 FROM unnest(%(went_ids)s::bigint[], %(went_attempts)s::int[])
                                 AS w(id, attempt)
                   WHERE w.id = j.id AND w.attempt = j.attempts
               ) AS never_went
    ) m
    WHERE j.status = 'sending' AND j.owner = ANY(%(dead)s::bigint[])
)
UPDATE broadcast_jobs j
SET status        = CASE WHEN d.dotted THEN 'unconfirmed'
                         WHEN d.poison THEN 'failed' ELSE 'retry' END,
    failure       = CASE WHEN d.poison AND NOT d.dotted THEN 'rejected' END,
    attempts      = j.attempts - CASE WHEN d.poison OR d.dotted THEN 0 ELSE 1 END,
    deaths        = j.deaths + CASE WHEN d.dotted THEN 0 ELSE 1 END,
    alone_deaths  = j.alone_deaths
                    + CASE WHEN j.suspect_claim AND NOT d.dotted THEN 1 ELSE 0 END,
    suspect_claim = false,
    owner         = CASE WHEN d.dotted THEN j.owner END,
    run_at        = now(),
    dot_at        = CASE WHEN d.dotted THEN d.dot_at ELSE j.dot_at END,
    dot_relay     = CASE WHEN d.dotted THEN d.dot_relay ELSE j.dot_relay END,
    last_stage    = 'rescue',
    last_code     = NULL,
    last_enhanced = NULL,
    last_reply    = CASE WHEN d.dotted
                         THEN 'worker ' || j.owner || ' died after its final dot went to '
                              || coalesce(d.dot_relay, 'the relay')
                              || ', before the reply was recorded: unconfirmed'
                         WHEN d.poison
                         THEN 'worker died while sending this job (' || (j.alone_deaths + 1)
                              || ' times, as its only suspect); not sent again'
                         WHEN d.never_went
                         THEN 'worker ' || j.owner || ' died before the final dot went'
                              || ' (its dot log shows it never did); attempt given back'
                         ELSE 'worker ' || j.owner
                              || ' died while holding this job; attempt given back' END,
    updated_at    = now()
FROM dead d
WHERE j.id = d.id

-- ===== Broadcast and campaign: running, paused, finished, cancelled =====

-- name: finish
-- Invariant 8: "done" is observable. A broadcast is finished (and, by the trigger
-- campaign_follows_broadcast, its campaign sent) only when it is fully enqueued (no
-- broadcast_enqueues row: the last chunk deletes it with its jobs) and no job is pending,
-- sending, retry or unconfirmed. A cancelled broadcast's jobs that were in flight when it was
-- cancelled, and came back as retry or pending (release), are cancelled here too.
-- `seen` is the broadcast as of this statement's snapshot; if retry-failed reopened it since
-- (bump_generation), the re-read row no longer matches and it is not finished.
WITH leftovers AS (
    UPDATE broadcast_jobs j SET status = 'cancelled', updated_at = now()
    FROM broadcasts b
    WHERE b.status = 'cancelled' AND j.broadcast_id = b.id AND j.status IN ('pending', 'retry')
)
UPDATE broadcasts b SET status = 'finished', finished_at = now()
FROM broadcasts seen
WHERE seen.id = b.id AND b.generation = seen.generation AND b.status = 'running'
  AND NOT EXISTS (SELECT 1 FROM broadcast_enqueues e WHERE e.broadcast_id = b.id)
  -- No job left in pending, sending, retry or unconfirmed: the one definition of unfinished
  -- (senddock_unfinished, migration 0026), from the counters, a few rows however big the
  -- broadcast is (a NOT EXISTS over its jobs walked every sent one before the first pending,
  -- each call: 123 ms to 0.7 ms). A later report's counter never changes it (issue 33), and an
  -- unconfirmed job keeps it open until a person resends or confirms it (issue 23).
  AND senddock_unfinished(b.id) = 0
RETURNING b.campaign_id AS id

-- name: pause_for_sender_fault
-- Invariant 6: a broadcast whose relay keeps rejecting *us* stops claiming until a person
-- resumes it; its campaign is paused with it (campaign_follows_broadcast).
UPDATE broadcasts SET status = 'paused', pause_reason = %(reason)s,
                      last_sender_fault = %(reason)s
WHERE id = %(broadcast_id)s AND status = 'running'

-- name: note_sender_fault
-- Invariant 6: the last reply that was about us, shown by `campaign status`.
UPDATE broadcasts SET last_sender_fault = %(reason)s WHERE id = %(id)s

-- name: set_running
-- Pause (running -> paused) or resume (paused -> running), by a person; the campaign follows
-- (campaign_follows_broadcast). Only from the expected status, so a cancel or finish that
-- came first is never undone.
UPDATE broadcasts SET status = %(to)s, pause_reason = NULL WHERE id = %(b)s AND status = %(from)s

-- name: hurry_sender_faults
-- On resume: jobs sent back by replies about us wait a backoff; once a person has fixed the
-- cause they may go at once.
UPDATE broadcast_jobs SET run_at = now() WHERE broadcast_id = %(b)s
  AND status = 'retry' AND sender_faults > 0 AND run_at > now()

-- name: cancel_draft
-- A draft (no broadcast yet) is cancelled on its own: it has no broadcast to follow.
UPDATE campaigns SET status = 'cancelled', updated_at = now()
WHERE id = %(c)s AND broadcast_id IS NULL

-- name: cancel_broadcast
-- Cancel stops claims at once (claim takes only `running` broadcasts) and its enqueue (the next
-- chunk sees it and stops); the campaign follows (campaign_follows_broadcast).
UPDATE broadcasts SET status = 'cancelled', finished_at = now() WHERE id = %(b)s

-- name: cancel_jobs
-- Every job not claimed is cancelled now; jobs in flight finish, and those given back later
-- are cancelled by finish.
UPDATE broadcast_jobs SET status = 'cancelled', updated_at = now()
WHERE broadcast_id = %(b)s AND status IN ('pending', 'retry')

-- name: held_jobs
-- The jobs workers hold at a cancel (their outcome still lands, or they are given back).
SELECT count(*) AS n FROM broadcast_jobs WHERE broadcast_id = %(b)s AND status = 'sending'

-- name: bump_generation
-- Retry-failed: locks the broadcast row and marks that its jobs moved back from a final state,
-- so a finish that read the queue before this commit cannot finish it afterwards. Retention
-- (freeze) sets purged_at under the same row lock before deleting the jobs.
UPDATE broadcasts SET generation = generation + 1 WHERE id = %(b)s RETURNING purged_at

-- name: requeue_failed
-- Retry-failed: the failed jobs whose address is not suppressed (now) go back to pending with a
-- fresh retry budget; their Message-ID stays (invariant 9). Jobs of suppressed addresses, and of
-- erased subscribers (0031: their address is gone), stay failed.
UPDATE broadcast_jobs j
SET status = 'pending', failure = NULL, attempts = 0, sender_faults = 0, owner = NULL,
    run_at = now(), updated_at = now()
WHERE j.broadcast_id = %(b)s AND j.status = 'failed'
  AND NOT EXISTS (SELECT 1 FROM suppressions s WHERE lower(s.email) = lower(j.email))
  AND NOT EXISTS (SELECT 1 FROM subscribers e WHERE e.id = j.subscriber_id AND e.status = 'erased')

-- name: resend_unconfirmed
-- Issue 23: a person chose to send the unconfirmed jobs of a broadcast again (the relay's log
-- shows they did not go, or a rare duplicate is better than silence): back to pending or
-- retry, due now, their attempt given back (the unconfirmed one was never judged, so the same
-- delivery is not charged twice), their Message-ID kept (invariant 9), so a relay or a reader
-- can tell a duplicate. `dot_at` and `dot_relay` stay until the next claim clears them.
-- `ids`: only these jobs (NULL: all of the broadcast's). Issue 41: `by` is who decided
-- (`person`, or the source that covers the job's window and never saw it: reconcile), kept
-- on the job with the time (settled_by, settled_at: 0029).
UPDATE broadcast_jobs
SET status     = CASE WHEN attempts - 1 <= 0 THEN 'pending' ELSE 'retry' END,
    attempts   = greatest(attempts - 1, 0),
    owner      = NULL,
    run_at     = now(),
    last_stage = 'resend',
    last_reply = CASE WHEN %(by)s = 'person' THEN 'unconfirmed; sent again on request'
                      ELSE 'unconfirmed; not accepted per ' || %(by)s || ': sent again' END,
    settled_by = %(by)s,
    settled_at = now(),
    updated_at = now()
WHERE broadcast_id = %(b)s AND status = 'unconfirmed'
  AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))

-- name: confirm
-- Issue 23: a person confirmed from the relay's log that the unconfirmed jobs of a broadcast
-- went: sent, as of their final dot. The broadcast may then finish (finish). `ids`: only
-- these jobs (NULL: all). Issue 41: `by` is who said so (`person`, or the source that shows
-- the relay accepted it: reconcile, a delivery event), kept with the time (0029).
UPDATE broadcast_jobs
SET status     = 'sent',
    sent_at    = coalesce(dot_at, now()),
    last_stage = 'confirm',
    last_reply = CASE WHEN %(by)s = 'person' THEN 'unconfirmed; confirmed sent on request'
                      ELSE 'unconfirmed; accepted per ' || %(by)s END,
    settled_by = %(by)s,
    settled_at = now(),
    updated_at = now()
WHERE broadcast_id = %(b)s AND status = 'unconfirmed'
  AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))

-- name: unconfirmed_jobs
-- Issue 23: the unconfirmed jobs of a broadcast with when their dot went, to which relay and
-- from which worker (campaign status, the API, the dashboard), oldest first.
SELECT id, email, message_id, owner, dot_at, dot_relay, attempts, claimed_at
FROM broadcast_jobs
WHERE broadcast_id = %(b)s AND status = 'unconfirmed'
ORDER BY dot_at NULLS FIRST, id
LIMIT %(limit)s

-- name: confirm_delivered
-- Issue 41: a provider's signed delivery event (SES Send or Delivery, Mailgun delivered,
-- SendGrid delivered, Postmark Delivery) names this job by our Message-ID, whose token the
-- intake checked (invariant 10): the relay accepted it. An unconfirmed job is sent at once,
-- unattended; any other status is left alone (a sent one stays sent, a resent one goes on:
-- its copy is the same Message-ID). By the unique key broadcast_jobs_once.
UPDATE broadcast_jobs
SET status     = 'sent',
    sent_at    = coalesce(dot_at, now()),
    last_stage = 'confirm',
    last_reply = 'unconfirmed; accepted per ' || %(by)s,
    settled_by = %(by)s,
    settled_at = now(),
    updated_at = now()
WHERE broadcast_id = %(b)s AND subscriber_id = %(s)s AND status = 'unconfirmed'
  AND lower(message_id) = lower(%(m)s)
RETURNING id

-- name: note_reconcile
-- Issue 41: what one source said of one unconfirmed job at this reconcile (0029), replacing
-- what it said before.
INSERT INTO reconcile_notes (broadcast_id, job_id, source, said, detail)
VALUES (%(b)s, %(job)s, %(source)s, %(said)s, %(detail)s)
ON CONFLICT (broadcast_id, job_id, source)
DO UPDATE SET said = excluded.said, detail = excluded.detail, noted_at = now()

-- name: forget_settled_notes
-- Issue 41: the notes of a broadcast's jobs that are no longer unconfirmed (settled since by
-- a source, a person or a late outcome) are gone: they only served the decision.
DELETE FROM reconcile_notes n
WHERE n.broadcast_id = %(b)s
  AND NOT EXISTS (SELECT 1 FROM broadcast_jobs j
                  WHERE j.id = n.job_id AND j.status = 'unconfirmed')

-- name: reconcile_notes
-- Issue 41: what each source said of a broadcast's unconfirmed jobs (dashboard, API, CLI).
SELECT n.job_id, n.source, n.said, n.detail, n.noted_at
FROM reconcile_notes n
JOIN broadcast_jobs j ON j.id = n.job_id AND j.status = 'unconfirmed'
WHERE n.broadcast_id = %(b)s
ORDER BY n.job_id, n.source

-- name: reopen
-- Invariant 8: a finished broadcast with work again is running again (and its campaign sending
-- again: campaign_follows_broadcast), in the transaction of the jobs, so counts stay exact.
UPDATE broadcasts b SET status = 'running', finished_at = NULL
WHERE b.id = %(b)s AND b.status = 'finished'
  AND EXISTS (SELECT 1 FROM broadcast_jobs j
              WHERE j.broadcast_id = b.id AND j.status IN ('pending', 'sending', 'retry'))

-- ===== Erasure: a subscriber erased on request (audience/erasure.py) =====

-- name: erase_fence
-- An erasure against the enqueue: taken exclusively, it waits for every chunk in flight (each
-- holds it shared: chunk_lock) and holds off new ones until it commits, so no chunk that read
-- the subscriber before the erasure commits a job with their address after it.
SELECT pg_advisory_xact_lock(%(key)s, %(sub)s)

-- name: erase_hold
-- Every job of the subscriber, locked: a claim (FOR UPDATE SKIP LOCKED) now skips them, and
-- one that committed first shows here as `sending`, which the erasure refuses (the message is
-- in flight; its outcome must land). On Postgres 18 broadcast_jobs_once serves it by skip scan.
SELECT id, broadcast_id, status FROM broadcast_jobs WHERE subscriber_id = %(s)s ORDER BY id
FOR UPDATE

-- name: erase_jobs
-- pending|retry|unconfirmed of an erased subscriber --> cancelled (never sent, nor sent again);
-- every job of theirs keeps its status otherwise, so the counts change only by those cancels
-- (the count triggers of 0010 see the rest move from a state to the same state). The address
-- becomes the erased row's stand-in; a reply that quotes the address (a 550 naming the
-- mailbox) keeps its codes and loses its text. Same transaction as erase_hold.
UPDATE broadcast_jobs
SET status     = CASE WHEN status IN ('pending', 'retry', 'unconfirmed') THEN 'cancelled'
                      ELSE status END,
    email      = %(stand_in)s,
    last_reply = CASE WHEN strpos(lower(last_reply), lower(%(local)s) || '@') > 0
                      THEN '(erased)' ELSE last_reply END,
    updated_at = now()
WHERE subscriber_id = %(s)s AND status <> 'sending'
RETURNING broadcast_id, status

-- ===== Scheduled drafts =====

-- name: schedule_draft
-- A draft waits for `send_at` (NULL: unscheduled); a new time clears the last give-up.
UPDATE campaigns SET send_at = %(at)s, schedule_error = NULL, updated_at = now()
WHERE id = %(c)s

-- name: due_drafts
-- The drafts whose time has come, locked with SKIP LOCKED: any number of schedulers on any
-- number of hosts, and each draft is sent by exactly one (in the same transaction).
SELECT id FROM campaigns
WHERE status = 'draft' AND send_at IS NOT NULL AND send_at <= now()
ORDER BY send_at LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: give_up_schedule
-- A due draft with nobody to send to stays a draft, unscheduled, with the reason shown.
UPDATE campaigns SET send_at = NULL, schedule_error = %(reason)s WHERE id = %(c)s

-- ===== Retention: the jobs of broadcasts that ended long ago are deleted =====

-- name: expired
-- An ended broadcast past retention whose counts are not frozen yet, locked (a retry-failed or
-- anything else touching it waits, or we skip it). Only once nothing of it is unfinished
-- (senddock_unfinished, 0026): a cancelled broadcast may still have a job in flight, whose
-- outcome must land, or an unconfirmed one waiting for a person; deleting those rows would
-- lose them and turn the frozen counts' `sending` into `pending` (issue 33: found by
-- tests/test_queue_model.py). A finished one has nothing unfinished by definition.
SELECT id FROM broadcasts
WHERE status IN ('finished', 'cancelled') AND purged_at IS NULL
  AND finished_at < now() - make_interval(days => %(days)s::int)
  AND senddock_unfinished(id) = 0
ORDER BY finished_at
LIMIT 1
FOR UPDATE SKIP LOCKED

-- name: freeze
-- Invariant 8: the counts are frozen on the broadcast, in the transaction that read them under
-- its lock, before any of its jobs is deleted; purged_at refuses retry-failed from now on.
UPDATE broadcasts SET final_counts = %(counts)s, purged_at = now() WHERE id = %(b)s

-- name: delete_batch
-- One batch of jobs of a frozen broadcast, still ended (read with its row share-locked, so a
-- retry-failed that would reopen it waits for this batch).
WITH b AS (
    SELECT id FROM broadcasts
    WHERE purged_at IS NOT NULL AND status IN ('finished', 'cancelled')
      AND EXISTS (SELECT 1 FROM broadcast_jobs j WHERE j.broadcast_id = broadcasts.id)
    ORDER BY purged_at
    LIMIT 1
    FOR SHARE SKIP LOCKED
), doomed AS (
    SELECT j.id FROM broadcast_jobs j, b WHERE j.broadcast_id = b.id LIMIT %(n)s
)
DELETE FROM broadcast_jobs j USING doomed WHERE j.id = doomed.id
