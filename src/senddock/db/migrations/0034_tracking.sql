-- 0034: opens and clicks, opt-in per campaign (issue 37). Additive only.

-- What a campaign tracks: '' (nothing: the default), 'opens', 'clicks' or 'opens,clicks', each
-- perhaps with ',anonymous' (counts per campaign only: no token, so no event, names a person)
-- (messages/tracking.py Track). Fixed once it is sent, like its message (campaigns/edits.py).
ALTER TABLE campaigns ADD COLUMN track text NOT NULL DEFAULT ''
    CHECK (track IN ('', 'opens', 'clicks', 'opens,clicks', 'opens,anonymous',
                     'clicks,anonymous', 'opens,clicks,anonymous'));

-- The links of a broadcast's message that are tracked, written by the worker that compiles it
-- (campaigns/compose.py). The redirect reads its target here, never from the request: a token
-- names a row by id, and a row's URL was in the message. One row per URL of a broadcast, so
-- workers compiling the same message at once agree on the ids (ON CONFLICT DO NOTHING).
CREATE TABLE tracked_links (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    broadcast_id  bigint NOT NULL REFERENCES broadcasts (id) ON DELETE CASCADE,
    position      integer NOT NULL,  -- where it first appears in the message, from 1
    url           text NOT NULL,
    UNIQUE (broadcast_id, url)
);

-- One row per request that a signed token named: an open (the image) or a click (link_id).
-- Written in batches by `serve` (tracking/events.py). `machine` and `why`: the judgement that
-- a machine made it and the evidence (a HEAD request, ...), counted apart, never dropped.
-- A subscriber deleted since keeps the event, unnamed; an anonymous campaign's name nobody.
CREATE TABLE track_events (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    broadcast_id  bigint NOT NULL REFERENCES broadcasts (id) ON DELETE CASCADE,
    subscriber_id bigint REFERENCES subscribers (id) ON DELETE SET NULL,
    link_id       bigint REFERENCES tracked_links (id) ON DELETE CASCADE,
    kind          text NOT NULL CHECK (kind IN ('open', 'click')),
    at            timestamptz NOT NULL,
    user_agent    text NOT NULL DEFAULT '' CHECK (length(user_agent) <= 500),
    machine       boolean NOT NULL DEFAULT false,
    why           text,
    CHECK ((kind = 'click') = (link_id IS NOT NULL))
);
-- A campaign's figures (tracking/report.sql) read its broadcast's events by kind.
CREATE INDEX track_events_broadcast ON track_events (broadcast_id, kind, subscriber_id);
-- A subscriber's deletion sets their events' subscriber_id to NULL through this index.
CREATE INDEX track_events_subscriber ON track_events (subscriber_id)
    WHERE subscriber_id IS NOT NULL;
-- A link's deletion (with its broadcast) finds its events.
CREATE INDEX track_events_link ON track_events (link_id) WHERE link_id IS NOT NULL;
