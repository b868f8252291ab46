-- Bounce messages and their findings (migration 0014). Effects on suppressions, jobs and
-- counts are the queue layer's.

-- name: receive
-- Keep a returned message once: its digest is unique, so the same bounce delivered again
-- (a relay that lost our 250, a poller restarted before it deleted) inserts nothing and
-- returns no row; the caller then reports it as already recorded.
INSERT INTO bounce_messages (source, envelope_to, digest, size, raw)
VALUES (%(source)s, %(envelope_to)s, %(digest)s, %(size)s, %(raw)s)
ON CONFLICT (digest) DO NOTHING
RETURNING id

-- name: known
-- The message recorded before with this digest (a duplicate's answer names it).
SELECT id, state FROM bounce_messages WHERE digest = %(digest)s

-- name: mark
-- What reading a message found: read (findings recorded), none, or unparsable, and why.
UPDATE bounce_messages SET state = %(state)s, why = %(why)s WHERE id = %(id)s

-- name: job_by_pair
-- The job a verified VERP address names (by the broadcast's unique key), with its address
-- and Message-ID; none after retention deleted it.
SELECT id, email, message_id FROM broadcast_jobs
WHERE broadcast_id = %(b)s AND subscriber_id = %(s)s

-- name: finding
-- One recipient's finding with its reason (0027), matched to a job's broadcast and subscriber
-- or to nobody.
INSERT INTO bounce_findings (message_id, recipient, kind, reason, status, reply, diagnostic,
                             broadcast_id, subscriber_id)
VALUES (%(message)s, %(recipient)s, %(kind)s, %(reason)s, %(status)s, %(reply)s,
        %(diagnostic)s, %(b)s, %(s)s)
RETURNING id

-- name: findings
-- `senddock bounces list`: every finding, newest first, with its message's state and source,
-- and the campaign of its broadcast; unmatched ones (no broadcast) only without a campaign;
-- of one kind and of one reason when asked.
-- At most `limit` rows (the newest), each with how many match
-- in all (`matching`), so the command can say how many more there are.
SELECT f.id, f.created_at, f.kind, f.reason, f.recipient, f.status, f.reply, f.diagnostic,
       f.broadcast_id, f.subscriber_id, b.campaign_id,
       m.id AS message, m.state, m.source, m.why, count(*) OVER () AS matching
FROM bounce_findings f
JOIN bounce_messages m ON m.id = f.message_id
LEFT JOIN broadcasts b ON b.id = f.broadcast_id
WHERE (%(campaign)s::bigint IS NULL OR b.campaign_id = %(campaign)s)
  AND (%(kind)s::text IS NULL OR f.kind = %(kind)s)
  AND (%(reason)s::text IS NULL OR f.reason = %(reason)s)
ORDER BY f.created_at DESC, f.id DESC
LIMIT %(limit)s

-- name: message_key
-- The key of our Message-IDs' per-recipient token (migration 0028, messages/message_id.py).
SELECT value FROM app_secrets WHERE name = 'message_id_key'
