-- The statements of layouts (campaigns/layouts.py): the templates a campaign's body goes into.

-- name: insert
-- A new layout; a name already taken (case-insensitive, layouts_name) is a unique violation the
-- module reports as a 409, so two concurrent adds of one name leave one layout.
INSERT INTO layouts (name, html_body, text_body) VALUES (%(name)s, %(html)s, %(text)s)
RETURNING id

-- name: all
-- Every layout with how many campaigns name it (what a delete would be refused for).
SELECT l.id, l.name, l.html_body, l.text_body, l.is_default, l.created_at, l.updated_at,
       (SELECT count(*) FROM campaigns c WHERE c.layout_id = l.id) AS campaigns
FROM layouts l ORDER BY lower(l.name)

-- name: by_name
-- One layout by name (case-insensitive, as the unique index compares), row-locked, so an edit
-- or delete and the in-use check that guards it see the same row.
SELECT l.id, l.name, l.html_body, l.text_body, l.is_default, l.created_at, l.updated_at,
       (SELECT count(*) FROM campaigns c WHERE c.layout_id = l.id) AS campaigns
FROM layouts l WHERE lower(l.name) = lower(%(name)s) FOR UPDATE OF l

-- name: by_id
-- One layout by id, row-locked like by_name.
SELECT l.id, l.name, l.html_body, l.text_body, l.is_default, l.created_at, l.updated_at,
       (SELECT count(*) FROM campaigns c WHERE c.layout_id = l.id) AS campaigns
FROM layouts l WHERE l.id = %(id)s FOR UPDATE OF l

-- name: default
-- The default layout's id, if one is set (at most one: layouts_one_default).
SELECT id FROM layouts WHERE is_default

-- name: active_users
-- Campaigns naming the layout whose broadcast is under way: their workers compiled the layout
-- once and may compile it again (a rescue, a new worker), so an edit now would mix versions.
SELECT id FROM campaigns WHERE layout_id = %(id)s AND status IN ('sending', 'paused')
ORDER BY id LIMIT 5

-- name: update
-- An edit: every field at once (the module merged the unchanged ones).
UPDATE layouts SET name = %(name)s, html_body = %(html)s, text_body = %(text)s,
                   updated_at = now()
WHERE id = %(id)s

-- name: clear_default
-- No layout is the default (before another becomes it, in the same transaction).
UPDATE layouts SET is_default = false, updated_at = now() WHERE is_default

-- name: set_default
-- This layout becomes the default (clear_default ran first in the transaction).
UPDATE layouts SET is_default = true, updated_at = now() WHERE id = %(id)s

-- name: delete
-- Only a layout no campaign names (the foreign key restricts it too; the module says why first).
DELETE FROM layouts WHERE id = %(id)s

-- name: lists_named
-- The ids of the lists a draft's form names (unknown names are skipped: a preview only picks
-- its sample subscriber from them; create refuses them).
SELECT id FROM lists WHERE name = ANY(%(names)s::text[])
