-- The preference centre (audience/preferences.py): a subscriber's own choices of lists, each
-- change written with its row in subscription_events, in one transaction.

-- name: subscriber
-- Whose page it is, locked: two submissions of one subscriber's page run one after the other,
-- and a subscriber deleted (or erased, 0031) since the link was sent is told apart (404).
-- The suppression, if any, with its reason (only an unsubscribe is lifted by rejoining).
SELECT s.id, s.email, s.name,
       (SELECT x.reason FROM suppressions x WHERE lower(x.email) = lower(s.email)) AS suppressed
FROM subscribers s WHERE s.id = %(subscriber)s AND s.status <> 'erased'
FOR UPDATE OF s;

-- name: lists
-- The lists the page shows: every public list, and every list the subscriber has a
-- membership of (any status, so a list they left can be rejoined), by name.
SELECT l.id, l.name, l.public, m.status
FROM lists l
LEFT JOIN list_memberships m ON m.list_id = l.id AND m.subscriber_id = %(subscriber)s
WHERE l.public OR m.subscriber_id IS NOT NULL
ORDER BY l.name, l.id;

-- name: leave
-- Leave one list: the membership becomes `unsubscribed`, which an import never undoes and
-- which the next broadcast's enqueue skips (it takes confirmed members only). Only a
-- membership not already left is written, so its rowcount says whether anything changed.
UPDATE list_memberships SET status = 'unsubscribed', updated_at = now()
WHERE list_id = %(list)s AND subscriber_id = %(subscriber)s AND status <> 'unsubscribed';

-- name: join
-- Join or rejoin a list the page shows: confirmed, since the signed link proves the address
-- is theirs (a pending double opt-in is confirmed by it too). A new membership starts now, so
-- a broadcast that began before does not take it; an existing one keeps its created_at.
INSERT INTO list_memberships (list_id, subscriber_id, status)
VALUES (%(list)s, %(subscriber)s, 'confirmed')
ON CONFLICT (list_id, subscriber_id) DO UPDATE SET status = 'confirmed', updated_at = now()
WHERE list_memberships.status <> 'confirmed';

-- name: lift_unsubscribe
-- Rejoining after "unsubscribe from everything": that suppression (reason `unsubscribe`) is
-- the subscriber's own and goes; a bounce, a complaint or a manual one never does.
DELETE FROM suppressions WHERE lower(email) = lower(%(email)s) AND reason = 'unsubscribe';

-- name: leave_others
-- Rejoining one list lifted an "unsubscribe from everything": every other list still marked
-- as received stays quiet (the page showed it as left, and the person asked for no more
-- messages), so it is left now; returned for their events. Same transaction as the join.
UPDATE list_memberships SET status = 'unsubscribed', updated_at = now()
WHERE subscriber_id = %(subscriber)s AND list_id <> %(list)s AND status <> 'unsubscribed'
RETURNING list_id;

-- name: leave_campaign_lists
-- One-click in the `lists` setting: leave every list the campaign went to, nothing else; the
-- lists left are returned for their events.
UPDATE list_memberships m SET status = 'unsubscribed', updated_at = now()
FROM campaign_lists cl
WHERE cl.campaign_id = %(campaign)s AND m.list_id = cl.list_id
  AND m.subscriber_id = %(subscriber)s AND m.status <> 'unsubscribed'
RETURNING m.list_id;

-- name: leave_all
-- Unsubscribe from everything, first: every membership not yet left; the lists left are
-- returned for their events. suppress_all follows in the same transaction.
UPDATE list_memberships SET status = 'unsubscribed', updated_at = now()
WHERE subscriber_id = %(subscriber)s AND status <> 'unsubscribed'
RETURNING list_id;

-- name: suppress_all
-- Unsubscribe from everything: the address is suppressed (reason `unsubscribe`, naming the
-- link's campaign's broadcast), so broadcasts already enqueued skip it too (the claim checks
-- suppressions). An earlier suppression keeps its first reason (DO NOTHING).
INSERT INTO suppressions (email, reason, source_broadcast_id, detail)
SELECT s.email, 'unsubscribe', c.broadcast_id, %(source)s
FROM subscribers s LEFT JOIN campaigns c ON c.id = %(campaign)s
WHERE s.id = %(subscriber)s
ON CONFLICT ((lower(email))) DO NOTHING;

-- name: record
-- The record of a change: who, which lists (NULL for unsubscribe_all), what, from where and
-- when (the database clock), in the transaction that made the change.
INSERT INTO subscription_events (subscriber_id, list_id, action, source, campaign_id)
SELECT %(subscriber)s, list_id, %(action)s, %(source)s, %(campaign)s
FROM unnest(%(lists)s::bigint[]) AS t(list_id);
