-- 0028: bounces nobody can forge, and a bounce MX that holds under attack (issue 34).

-- The key of the per-recipient token in our Message-ID (queue/jobs.sql enqueue,
-- bounces/verp.py): `<sd.B.S.TOKEN@domain>`, TOKEN 128 bits of HMAC-SHA256 over broadcast and
-- subscriber. Until now TOKEN was 8 hex characters per broadcast, so any recipient could swap
-- the subscriber id in their own Message-ID and suppress everyone with a forged DSN (199 of
-- 200 in 9.6 s). A key of its own, not the link key: it is read where the enqueue runs (the
-- queue layer, which knows no settings), and whoever can read it can read every job's
-- Message-ID in broadcast_jobs anyway. gen_random_uuid() draws from the strong random source.
INSERT INTO app_secrets (name, value)
VALUES ('message_id_key', replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''))
ON CONFLICT (name) DO NOTHING;

-- A returned message's bytes are kept SENDDOCK_BOUNCE_RAW_DAYS (30 by default), then purged
-- by the cleaner (delivery/cleaner.py); its row, its findings and their effects stay.
ALTER TABLE bounce_messages ALTER COLUMN raw DROP NOT NULL;
CREATE INDEX bounce_messages_raw_kept ON bounce_messages (received_at) WHERE raw IS NOT NULL;
