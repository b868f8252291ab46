-- Lists by name and their options (audience/lists.py).

-- name: ensure_list
-- The id of a list, made if new. An upsert that always returns the row (DO UPDATE with the
-- same name, not DO NOTHING, which returns nothing for an existing row), so two importers
-- naming a new list at once both get its one id.
INSERT INTO lists (name) VALUES (%(name)s)
ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name
RETURNING id;

-- name: find_list
-- The id of a list by its exact name; no row means no such list (UnknownList).
SELECT id FROM lists WHERE name = %(name)s;

-- name: set_options
-- A list's double opt-in and From address, each left as it is when NULL. The table's CHECK
-- refuses double opt-in without a From address (who asks to confirm), raised as ListError.
UPDATE lists SET double_opt_in = coalesce(%(double_opt_in)s, double_opt_in),
                 from_addr = coalesce(%(from_addr)s, from_addr)
WHERE id = %(list)s;

-- name: all_lists
-- Every list with its options and its members counted by membership status, a suppressed
-- address (no broadcast sends to it) counted apart as `suppressed`, never as confirmed or
-- unconfirmed (issue 35). The suppressed members are found from the suppressions (few) by
-- address, then their memberships by skip scan of the primary key (Postgres 18).
WITH members AS (
    SELECT list_id,
           count(*) FILTER (WHERE status = 'confirmed') AS confirmed,
           count(*) FILTER (WHERE status = 'unconfirmed') AS unconfirmed,
           count(*) FILTER (WHERE status = 'unsubscribed') AS unsubscribed
    FROM list_memberships GROUP BY list_id
), held AS (
    SELECT m.list_id,
           count(*) FILTER (WHERE m.status = 'confirmed') AS confirmed,
           count(*) FILTER (WHERE m.status = 'unconfirmed') AS unconfirmed
    FROM suppressions x
    JOIN subscribers s ON lower(s.email) = lower(x.email)
    JOIN list_memberships m ON m.subscriber_id = s.id AND m.status <> 'unsubscribed'
    GROUP BY m.list_id
)
SELECT l.id, l.name, l.description, l.double_opt_in, l.from_addr, l.public, l.consent_text,
       coalesce(c.confirmed, 0) - coalesce(h.confirmed, 0) AS confirmed,
       coalesce(c.unconfirmed, 0) - coalesce(h.unconfirmed, 0) AS unconfirmed,
       coalesce(c.unsubscribed, 0) AS unsubscribed,
       coalesce(h.confirmed + h.unconfirmed, 0) AS suppressed
FROM lists l
LEFT JOIN members c ON c.list_id = l.id
LEFT JOIN held h ON h.list_id = l.id
ORDER BY l.name;

-- name: create_list
-- A new list with its description; no row back when the name is taken (create refuses it
-- as a Conflict instead of raising on the unique name mid-transaction).
INSERT INTO lists (name, description) VALUES (%(name)s, %(description)s)
ON CONFLICT (name) DO NOTHING
RETURNING id;

-- name: edit_list
-- A list's name and description, each left as it is when NULL; its name back, for the
-- messages. Campaigns and memberships name the list by id, so a rename changes nothing they
-- hold; a name another list has fails on the unique index (Conflict).
UPDATE lists SET name = coalesce(%(name)s, name), description = coalesce(%(description)s, description)
WHERE id = %(list)s
RETURNING id, name;

-- name: list_by_id
-- One list's fields for its edit page, by primary key.
SELECT id, name, description, double_opt_in, from_addr, created_at FROM lists WHERE id = %(list)s;

-- name: lock_list
-- A list about to be deleted, locked: a campaign that names it meanwhile (its campaign_lists
-- row takes a key-share lock on this row) waits, then fails on the key once it is gone.
SELECT id, name FROM lists WHERE id = %(list)s FOR UPDATE;

-- name: campaigns_naming
-- The campaigns still to send that name the list (a draft, scheduled or not, one sending or
-- paused): while there is one the list cannot go. A few, for the refusal's line.
SELECT c.id, c.name, c.status FROM campaign_lists cl JOIN campaigns c ON c.id = cl.campaign_id
WHERE cl.list_id = %(list)s AND c.status IN ('draft', 'sending', 'paused')
ORDER BY c.id LIMIT 5;

-- name: unlink_campaigns
-- Sent and cancelled campaigns that named the list forget it (their counts, jobs and
-- recipients stay); how many.
DELETE FROM campaign_lists WHERE list_id = %(list)s;

-- name: delete_list
-- The list, its memberships with it (ON DELETE CASCADE); subscribers stay, on their other
-- lists. Sign-up consent rows keep their time, IP and User-Agent with no list (0031), and
-- subscription events already lose theirs (0023).
DELETE FROM lists WHERE id = %(list)s;

-- name: member_count
-- How many memberships the list has, for the line that says what went.
SELECT count(*) AS n FROM list_memberships WHERE list_id = %(list)s;
