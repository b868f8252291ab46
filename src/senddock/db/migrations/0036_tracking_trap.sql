-- 0036: the hidden trap link (issue 37, item 3d). Additive only.

-- A 'trap' event is a request for the link no person sees (messages/tracking.py): always a
-- machine's, named like an open (no link_id). Counted in no figure; it marks the job's clicks
-- near it as a machine's (tracking/events.sql judge_trap).
ALTER TABLE track_events DROP CONSTRAINT track_events_kind_check;
ALTER TABLE track_events ADD CONSTRAINT track_events_kind_check
    CHECK (kind IN ('open', 'click', 'trap'));
