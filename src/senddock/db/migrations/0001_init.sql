-- 0001: the whole first schema. The queue is broadcast_jobs; see shared DESIGN.md.

CREATE TABLE subscribers (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email       text NOT NULL,
    name        text NOT NULL DEFAULT '',
    attributes  jsonb NOT NULL DEFAULT '{}'::jsonb,
    -- 'active' | 'bounced' (a permanent 5xx for this address was seen)
    status      text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'bounced')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
-- One subscriber per address, whatever its case.
CREATE UNIQUE INDEX subscribers_email_key ON subscribers (lower(email));

CREATE TABLE lists (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE list_memberships (
    list_id       bigint NOT NULL REFERENCES lists (id) ON DELETE CASCADE,
    subscriber_id bigint NOT NULL REFERENCES subscribers (id) ON DELETE CASCADE,
    status        text NOT NULL DEFAULT 'confirmed'
                  CHECK (status IN ('unconfirmed', 'confirmed', 'unsubscribed')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (list_id, subscriber_id)
);

CREATE TABLE campaigns (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          text NOT NULL,
    list_id       bigint NOT NULL REFERENCES lists (id),
    subject       text NOT NULL,
    from_addr     text NOT NULL,
    text_body     text NOT NULL,
    html_body     text,
    -- draft -> sending -> sent; sending <-> paused
    status        text NOT NULL DEFAULT 'draft'
                  CHECK (status IN ('draft', 'sending', 'paused', 'sent', 'cancelled')),
    broadcast_id  bigint,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE broadcasts (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- One broadcast per campaign: sending a campaign twice creates nothing new (invariant 7).
    campaign_id     bigint NOT NULL UNIQUE REFERENCES campaigns (id),
    -- running: claimable; paused: no new claims; finished: nothing left unfinished.
    status          text NOT NULL DEFAULT 'running'
                    CHECK (status IN ('running', 'paused', 'finished', 'cancelled')),
    total           integer NOT NULL,
    -- The last reply that was about us (sender side), and why the broadcast is paused.
    last_sender_fault text,
    pause_reason    text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);

ALTER TABLE campaigns
    ADD CONSTRAINT campaigns_broadcast_fk FOREIGN KEY (broadcast_id) REFERENCES broadcasts (id);

CREATE TABLE suppressions (
    email               text NOT NULL,
    reason              text NOT NULL CHECK (reason IN ('bounce', 'unsubscribe', 'complaint', 'manual')),
    source_broadcast_id bigint REFERENCES broadcasts (id) ON DELETE SET NULL,
    detail              text,
    created_at          timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX suppressions_email_key ON suppressions (lower(email));

-- Live worker processes. Liveness: a heartbeat written with the database clock, plus a
-- session advisory lock held on the heartbeat connection (see delivery/liveness.py).
CREATE TABLE workers (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    host          text NOT NULL,
    boot_id       text NOT NULL,
    pid           integer NOT NULL,
    pid_started   text NOT NULL,
    concurrency   integer NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now(),
    stopping      boolean NOT NULL DEFAULT false
);

CREATE TABLE broadcast_jobs (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    broadcast_id    bigint NOT NULL REFERENCES broadcasts (id) ON DELETE CASCADE,
    subscriber_id   bigint NOT NULL REFERENCES subscribers (id),
    email           text NOT NULL,
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'sending', 'retry', 'sent', 'failed')),
    -- Counted at claim, so a job that kills its worker cannot retry forever (invariant 2).
    attempts        integer NOT NULL DEFAULT 0,
    run_at          timestamptz NOT NULL DEFAULT now(),
    owner           bigint,
    claimed_at      timestamptz,
    -- Why a failed job failed: bounced | suppressed | exhausted | rejected.
    failure         text,
    -- Replies about us that sent this job back without counting an attempt.
    sender_faults   integer NOT NULL DEFAULT 0,
    last_code       integer,
    last_enhanced   text,
    last_reply      text,
    last_stage      text,
    sent_at         timestamptz,
    message_id      text NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    -- One job per address per broadcast (invariant 7).
    UNIQUE (broadcast_id, subscriber_id)
) WITH (fillfactor = 80);

-- Claimable rows only: stays small however many finished rows the table holds.
CREATE INDEX broadcast_jobs_claimable ON broadcast_jobs (run_at)
    WHERE status IN ('pending', 'retry');
-- Rows held by a worker: the rescuer looks them up by owner.
CREATE INDEX broadcast_jobs_sending ON broadcast_jobs (owner) WHERE status = 'sending';
-- Exact counts per broadcast come from this index (invariant 8).
CREATE INDEX broadcast_jobs_counts ON broadcast_jobs (broadcast_id, status, failure);

ALTER TABLE broadcast_jobs SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02
);
