-- Subscribers one at a time: add, update, remove, show (audience/subscribers.py).
-- One subscriber per address, case ignored: every lookup is on lower(email), the unique index.

-- name: find
-- A subscriber by address, case ignored (the lower(email) unique index).
SELECT id, email, name, status, attributes, created_at, updated_at FROM subscribers
WHERE lower(email) = lower(%(email)s);

-- name: find_for_update
-- The same, locked until the transaction ends: update and remove read the row, then write it
-- (merged attributes, the decision to delete), and a concurrent change must wait for that.
SELECT id, email, name, status, attributes, created_at, updated_at FROM subscribers
WHERE lower(email) = lower(%(email)s) FOR UPDATE;

-- name: insert
-- A new subscriber; no row back when the address (case ignored) is taken, which `add` reports
-- instead of raising on the unique index mid-transaction.
INSERT INTO subscribers (email, name, attributes) VALUES (%(email)s, %(name)s, %(attributes)s)
ON CONFLICT ((lower(email))) DO NOTHING RETURNING id;

-- name: join_list
-- Join one list: a double opt-in list leaves the membership unconfirmed until the link is
-- followed (only confirmed members are sent campaigns). An existing membership is left as it
-- is (DO NOTHING): someone who left a list stays left.
INSERT INTO list_memberships (list_id, subscriber_id, status)
SELECT l.id, %(subscriber)s, CASE WHEN l.double_opt_in THEN 'unconfirmed' ELSE 'confirmed' END
FROM lists l WHERE l.id = %(list)s
ON CONFLICT DO NOTHING;

-- name: update
-- A subscriber's address, name and merged attributes, written under the row lock that
-- find_for_update took; a new address another subscriber has fails on the unique index.
UPDATE subscribers SET email = %(email)s, name = %(name)s, attributes = %(attributes)s,
                       updated_at = now()
WHERE id = %(subscriber)s;

-- name: leave_list
-- Take a subscriber off one list (the row goes: a removal, not an unsubscribe).
DELETE FROM list_memberships WHERE list_id = %(list)s AND subscriber_id = %(subscriber)s;

-- name: leave_every_list
-- Take a subscriber off every list, before deciding whether the row itself may go.
DELETE FROM list_memberships WHERE subscriber_id = %(subscriber)s;

-- name: job_count
-- How many job rows name the subscriber: a subscriber with delivery history keeps its row
-- (jobs reference it), so `campaign recipients` and the counts stay whole.
SELECT count(*) AS n FROM broadcast_jobs WHERE subscriber_id = %(subscriber)s;

-- name: delete
-- Delete a subscriber that no job names (job_count found none, under the row lock).
DELETE FROM subscribers WHERE id = %(subscriber)s;

-- name: suppression
-- The address's suppression, if any, case ignored (the claim's own test).
SELECT reason, created_at, detail FROM suppressions WHERE lower(email) = lower(%(email)s);

-- name: memberships
-- Every list the subscriber is on, with the membership's status, by list name.
SELECT l.name, m.status, m.created_at, m.updated_at
FROM list_memberships m JOIN lists l ON l.id = m.list_id
WHERE m.subscriber_id = %(subscriber)s ORDER BY l.name;

-- name: history
-- The subscriber's latest messages, newest job first, at most `limit` of them.
SELECT c.id AS campaign_id, c.name AS campaign, j.status, j.failure, j.sent_at, j.message_id
FROM broadcast_jobs j JOIN broadcasts b ON b.id = j.broadcast_id
JOIN campaigns c ON c.id = b.campaign_id
WHERE j.subscriber_id = %(subscriber)s ORDER BY j.id DESC LIMIT %(limit)s;
