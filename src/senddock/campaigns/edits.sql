-- The statements that change a campaign's record after create (campaigns/edits.py): edit a
-- draft, clone any campaign, delete a draft, archive a finished one. None writes a status: each
-- runs with the campaign row-locked by the queue's lock_campaign, and the caller judges the
-- status it read under that lock (a `campaign send` waits for the edit, or the edit for it).

-- name: fields
-- A campaign's editable fields and its lists, read under the caller's lock, to tell what an
-- edit changes.
SELECT c.name, c.subject, c.from_addr, c.reply_to, c.text_body, c.html_body, c.send_at,
       c.archived_at, c.markdown_body, c.layout_id, c.segment_id, c.audience_filter, c.track,
       (SELECT l.name FROM layouts l WHERE l.id = c.layout_id) AS layout_name,
       (SELECT g.name FROM segments g WHERE g.id = c.segment_id) AS segment_name,
       array(SELECT cl.list_id FROM campaign_lists cl WHERE cl.campaign_id = c.id
             ORDER BY cl.list_id) AS list_ids
FROM campaigns c WHERE c.id = %(c)s

-- name: update_fields
-- A draft's new fields (layout, Markdown, segment and filter, what it tracks too), all checked like create's before this statement (the row is locked and
-- still a draft with no broadcast, so nothing enqueued is rendered from the old ones).
UPDATE campaigns
SET name = %(name)s, subject = %(subject)s, from_addr = %(from_addr)s, reply_to = %(reply_to)s,
    text_body = %(text_body)s, html_body = %(html_body)s, markdown_body = %(markdown_body)s,
    layout_id = %(layout_id)s, segment_id = %(segment_id)s, audience_filter = %(audience_filter)s,
    track = %(track)s, updated_at = now()
WHERE id = %(c)s

-- name: drop_lists
-- A draft's old lists, replaced in the same transaction (insert_lists): a campaign never exists
-- without its lists.
DELETE FROM campaign_lists WHERE campaign_id = %(c)s

-- name: insert_lists
-- A draft's lists (after drop_lists), in the edit's transaction.
INSERT INTO campaign_lists (campaign_id, list_id) SELECT %(c)s, unnest(%(lists)s::bigint[])

-- name: clone
-- A new draft with a campaign's message and lists (any campaign, a sent one too): no schedule,
-- no broadcast, not archived; its status is the column's default, `draft`. Its layout, Markdown
-- body (0020), segment and filter (0021), and what it tracks (0034) come along.
INSERT INTO campaigns (name, subject, from_addr, reply_to, text_body, html_body, layout_id,
                       markdown_body, segment_id, audience_filter, track)
SELECT %(name)s, subject, from_addr, reply_to, text_body, html_body, layout_id,
       markdown_body, segment_id, audience_filter, track
FROM campaigns WHERE id = %(c)s
RETURNING id

-- name: clone_lists
-- The clone's lists are its source's, in the clone's transaction.
INSERT INTO campaign_lists (campaign_id, list_id)
SELECT %(new)s, list_id FROM campaign_lists WHERE campaign_id = %(c)s

-- name: delete_draft
-- A draft never sent: it has no broadcast, so no job and no history names it; its lists go with
-- it (ON DELETE CASCADE, 0004). The broadcast_id condition is a second fence: a row that has a
-- broadcast is never deleted, whatever the caller judged.
DELETE FROM campaigns WHERE id = %(c)s AND broadcast_id IS NULL

-- name: set_archived
-- Archive (keeping the first time) or unarchive. A column, not a status: the campaign's status
-- stays its broadcast's, and no worker reads this.
UPDATE campaigns
SET archived_at = CASE WHEN %(archived)s THEN coalesce(archived_at, now()) END
WHERE id = %(c)s
