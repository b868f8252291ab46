-- The statements that read a campaign's message (campaigns/compose.py): its templates, its
-- link key, and the recipient a preview renders for.

-- name: link_key
-- The key made by migration 0003 that signs every link (SENDDOCK_SECRET_KEY overrides it): one
-- key for the worker, the previews and the web, so a link made by one is accepted by the others.
SELECT value FROM app_secrets WHERE name = 'link_key'

-- name: message_of_campaign
-- A campaign's message fields and its layout's templates, for a preview or a test send.
SELECT c.id, c.subject, c.from_addr, c.reply_to, c.text_body, c.html_body, c.markdown_body,
       l.html_body AS layout_html, l.text_body AS layout_text
FROM campaigns c LEFT JOIN layouts l ON l.id = c.layout_id WHERE c.id = %(id)s

-- name: message_of_broadcast
-- The message fields of a broadcast's campaign and its layout's templates, for the worker
-- (compiled once per broadcast; a layout is not edited while its broadcast is under way), and
-- what it tracks (0034: fixed once sent, like the message).
SELECT c.id, c.subject, c.from_addr, c.reply_to, c.text_body, c.html_body, c.markdown_body,
       l.html_body AS layout_html, l.text_body AS layout_text, c.track
FROM broadcasts b JOIN campaigns c ON c.id = b.campaign_id
LEFT JOIN layouts l ON l.id = c.layout_id WHERE b.id = %(id)s

-- name: subscriber
-- The subscriber with an address (case-insensitive: one subscriber per address), if any.
SELECT id, email, name, attributes FROM subscribers WHERE lower(email) = lower(%s)

-- name: member
-- The campaign's lists, and the subscriber with that address if they are on one of them (one
-- row always: a preview for someone else names the lists it looked in).
SELECT (SELECT string_agg(l.name, ', ' ORDER BY l.name) FROM campaign_lists cl
        JOIN lists l ON l.id = cl.list_id WHERE cl.campaign_id = %(c)s) AS lists,
       s.id, s.email, s.name, s.attributes
FROM (SELECT 1) AS one
LEFT JOIN subscribers s ON lower(s.email) = lower(%(a)s)
     AND EXISTS (SELECT 1 FROM list_memberships m JOIN campaign_lists cl ON cl.list_id = m.list_id
                 WHERE cl.campaign_id = %(c)s AND m.subscriber_id = s.id)
