-- Erasure on request (audience/erasure.py): every row that holds a subscriber's address,
-- name, attributes or consent is deleted or stripped, in one transaction. The queue's own
-- statements (queue/jobs.sql erase_*) take the address out of the jobs.

-- name: whose
-- The subscriber of an address, case ignored, before anything is locked (the jobs are locked
-- first, then this row: the order an outcome write takes them, so the two never deadlock).
SELECT id, email FROM subscribers WHERE lower(email) = lower(%(email)s);

-- name: lock
-- The subscriber, locked for the rest of the erasure, by id (its address may have changed
-- since `whose`; the locked row's is the one erased).
SELECT id, email, status FROM subscribers WHERE id = %(s)s FOR UPDATE;

-- name: unsuppress
-- The address's suppression goes with the address; its reason comes back, for the digest that
-- keeps it when the person asked to stay suppressed.
DELETE FROM suppressions WHERE lower(email) = lower(%(email)s) RETURNING reason;

-- name: keep_suppressed
-- The person asked never to be mailed again: only the SHA-256 of the lower-cased address is
-- kept (0031), which the enqueue and a sign-up test an address against.
INSERT INTO erased_suppressions (digest, reason)
VALUES (sha256(convert_to(lower(%(email)s), 'UTF8')), %(reason)s)
ON CONFLICT (digest) DO NOTHING;

-- name: forget_memberships
-- Off every list.
DELETE FROM list_memberships WHERE subscriber_id = %(s)s;

-- name: forget_consents
-- The sign-up consent rows (0022): time, IP, User-Agent of each sign-up.
DELETE FROM signup_consents WHERE subscriber_id = %(s)s;

-- name: forget_events
-- The preference history (0023).
DELETE FROM subscription_events WHERE subscriber_id = %(s)s;

-- name: scrub_findings
-- Every bounce or complaint finding about them (matched to them, or naming their address
-- unmatched): the kind, status code and job stay (the counts rest on bounce_effects, which
-- holds no address), the address and what the remote server said go. The messages they came
-- in come back, for scrub_messages.
UPDATE bounce_findings SET recipient = NULL, reply = NULL, diagnostic = NULL
WHERE subscriber_id = %(s)s OR lower(recipient) = lower(%(email)s)
RETURNING message_id;

-- name: scrub_messages
-- The raw returned messages those findings came in, and any kept message no finding was read
-- from (an auto-reply, an unparsable one) whose bytes hold the address: the bytes go as the
-- retention purge (delivery/cleaner.sql purge_raw, 0028) takes them, to NULL; the digest
-- stays (the same message delivered again is still known, and still changes nothing). A
-- message that reported on several recipients loses its bytes for all of them; their findings
-- stay. `encode(.., 'escape')` makes any bytes text (non-ASCII bytes as \nnn), so the search
-- never fails on a message that is not UTF-8.
UPDATE bounce_messages m
SET raw = NULL,
    envelope_to = CASE WHEN strpos(lower(envelope_to), lower(%(email)s)) > 0 THEN NULL
                       ELSE envelope_to END,
    why = 'erased on request'
WHERE m.id = ANY(%(ids)s::bigint[])
   OR (m.state IN ('received', 'none', 'unparsable') AND m.raw IS NOT NULL
       AND strpos(lower(encode(m.raw, 'escape')),
                  lower(encode(convert_to(lower(%(email)s), 'UTF8'), 'escape'))) > 0)
RETURNING m.id;

-- name: unname_engagement
-- Their opens and clicks (0034) stay in the campaign's totals with nobody's id and no
-- User-Agent.
UPDATE track_events SET subscriber_id = NULL, user_agent = '' WHERE subscriber_id = %(s)s;

-- name: scrub_imports
-- An import's rejected rows quote their lines ("line 7: ..."): those that name the address go.
UPDATE import_jobs
SET errors = coalesce((SELECT jsonb_agg(e ORDER BY n)
                       FROM jsonb_array_elements(errors) WITH ORDINALITY AS t (e, n)
                       WHERE strpos(lower(e::text), lower(%(email)s)) = 0), '[]'::jsonb),
    error = CASE WHEN strpos(lower(error), lower(%(email)s)) > 0 THEN '(erased)' ELSE error END
WHERE strpos(lower(errors::text), lower(%(email)s)) > 0
   OR strpos(lower(error), lower(%(email)s)) > 0;

-- name: delete
-- A subscriber no job names goes entirely (the delete guard of 0010 refuses one that has).
DELETE FROM subscribers WHERE id = %(s)s;

-- name: anonymize
-- A subscriber jobs name stays, for the campaigns' recipients and counts, holding nothing of
-- the person: a stand-in address under .invalid (RFC 6761: never delivered), no name, no
-- attributes, status `erased` (no enqueue takes it, 0031).
UPDATE subscribers
SET email = 'erased-' || id || '@erased.invalid', name = '', attributes = '{}'::jsonb,
    status = 'erased', erased_at = now(), updated_at = now()
WHERE id = %(s)s
RETURNING email;
