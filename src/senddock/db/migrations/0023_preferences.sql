-- 0023: the preference centre (issue 22.5). Additive only.

-- A public list (lists.public, 0022: it takes sign-ups) is also shown on every subscriber's
-- preference page, to join or leave; a private one only to its members.

-- Every change a subscriber makes on their preference page (and a one-click unsubscribe that
-- only leaves lists), with its time and source: the record of who chose what, and when.
CREATE TABLE subscription_events (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscriber_id bigint NOT NULL REFERENCES subscribers (id) ON DELETE CASCADE,
    -- NULL for unsubscribe_all (every list at once)
    list_id       bigint REFERENCES lists (id) ON DELETE SET NULL,
    action        text NOT NULL CHECK (action IN ('join', 'leave', 'unsubscribe_all')),
    -- 'preferences page' | 'one-click' | 'unsubscribe page'
    source        text NOT NULL,
    -- the campaign whose link was followed (no foreign key: a draft may be deleted)
    campaign_id   bigint,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX subscription_events_subscriber ON subscription_events (subscriber_id, created_at);
