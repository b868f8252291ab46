-- The suppression list (audience/suppressions.py): addresses no broadcast sends to. The claim
-- checks it too (lower(email), as here), so a suppression also stops jobs already enqueued.

-- name: suppress
-- Suppress an address; no row changed when it already was (case ignored), and then its first
-- reason is kept: a later manual entry never hides that the address bounced.
INSERT INTO suppressions (email, reason, source_broadcast_id, detail)
VALUES (%(email)s, %(reason)s, %(broadcast)s, %(detail)s)
ON CONFLICT ((lower(email))) DO NOTHING;

-- name: unsuppress
-- Make an address sendable again (case ignored); untag_bounced follows in the same
-- transaction.
DELETE FROM suppressions WHERE lower(email) = lower(%(email)s);

-- name: untag_bounced
-- Removing a suppression makes the address sendable again: a bounce tag on its subscriber
-- goes too, in the same transaction as the suppression.
UPDATE subscribers SET status = 'active', updated_at = now()
WHERE lower(email) = lower(%(email)s) AND status = 'bounced';

-- name: list
-- Every suppressed address, alphabetically (case ignored), of one reason or (NULL) all.
SELECT email, reason, created_at, source_broadcast_id, coalesce(detail, '') AS detail,
       bounce_reason
FROM suppressions WHERE (%(reason)s::text IS NULL OR reason = %(reason)s) ORDER BY lower(email);

-- name: is_suppressed
-- Whether an address is suppressed, case ignored (the claim's own test).
SELECT 1 FROM suppressions WHERE lower(email) = lower(%(email)s);

-- name: lock_subscriber
-- One-click unsubscribe, first: the subscriber row, locked, so that a subscriber deleted
-- since the link was sent is told apart (nothing to do) and two clicks run one after the other.
SELECT 1 FROM subscribers WHERE id = %(subscriber)s FOR UPDATE;

-- name: unsubscribe_suppress
-- One-click unsubscribe: suppress the address (reason `unsubscribe`, naming the campaign's
-- broadcast). Same transaction as unsubscribe_memberships; idempotent: a second click changes
-- nothing (DO NOTHING keeps the first reason).
INSERT INTO suppressions (email, reason, source_broadcast_id, detail)
SELECT s.email, 'unsubscribe', c.broadcast_id, %(detail)s
FROM subscribers s LEFT JOIN campaigns c ON c.id = %(campaign)s
WHERE s.id = %(subscriber)s
ON CONFLICT ((lower(email))) DO NOTHING;

-- name: unsubscribe_memberships
-- One-click unsubscribe: the memberships of every list the campaign went to become
-- `unsubscribed`, which an import never undoes. Only a membership not already left is written
-- (idempotent).
UPDATE list_memberships m SET status = 'unsubscribed', updated_at = now()
FROM campaign_lists cl
WHERE cl.campaign_id = %(campaign)s AND m.list_id = cl.list_id
  AND m.subscriber_id = %(subscriber)s AND m.status <> 'unsubscribed';

-- name: who
-- What an unsubscribe link is about, for its page: the address, the names of every list its
-- campaign went to, and whether the address is suppressed already. A GET reads only: link
-- scanners change nothing.
SELECT s.email,
       ARRAY(SELECT l.name FROM campaign_lists cl JOIN lists l ON l.id = cl.list_id
             WHERE cl.campaign_id = %(campaign)s ORDER BY l.name) AS list_names,
       EXISTS (SELECT 1 FROM suppressions x WHERE lower(x.email) = lower(s.email)) AS suppressed
FROM subscribers s
WHERE s.id = %(subscriber)s;
