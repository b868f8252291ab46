-- 0014: bounces and complaints that come back after the relay's 250 (issue 21).
-- Every returned message or provider event is kept as received, once (its digest is unique:
-- the same bounce delivered twice, by a relay that lost our 250 or a poller restarted before
-- it deleted, changes nothing), with what it said about whom. See senddock/bounces/.

CREATE TABLE bounce_messages (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    received_at timestamptz NOT NULL DEFAULT now(),
    -- How it came: the listener, a mailbox, the pipe, or a provider's webhook.
    source      text NOT NULL CHECK (source IN ('smtp', 'imap', 'pop3', 'pipe', 'ses',
                                                'mailgun', 'sendgrid', 'postmark')),
    -- The address it was sent to (a VERP return path names its job).
    envelope_to text,
    digest      bytea NOT NULL UNIQUE,
    size        integer NOT NULL,
    raw         bytea NOT NULL,
    -- received: stored, not yet read; read: its findings are recorded (each matched or not);
    -- none: nothing in it is a bounce (an auto-reply, a delay notice); unparsable: kept for a
    -- person to look at.
    state       text NOT NULL DEFAULT 'received'
                CHECK (state IN ('received', 'read', 'none', 'unparsable')),
    why         text
);

-- One recipient a message or event reports on, and the job it was matched to (if any).
CREATE TABLE bounce_findings (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id    bigint NOT NULL REFERENCES bounce_messages (id) ON DELETE CASCADE,
    recipient     text,
    kind          text NOT NULL CHECK (kind IN ('hard', 'soft', 'policy', 'complaint')),
    status        text,
    reply         text,
    diagnostic    text,
    -- The job it is about: NULL when nothing of ours matched (kept, suppresses nobody).
    broadcast_id  bigint,
    subscriber_id bigint,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX bounce_findings_broadcast ON bounce_findings (broadcast_id, kind)
    WHERE broadcast_id IS NOT NULL;
CREATE INDEX bounce_findings_recipient ON bounce_findings (lower(recipient), created_at);
