-- 0021: segments (issue 22, part 3). A campaign's audience is its lists narrowed by an optional
-- filter over subscriber fields and attributes, written in SendDock's small filter language
-- (senddock/audience/segment_filter.py), never SQL. Additive only.

-- A saved filter, asked for by name (`senddock segment add NAME EXPR`). The text is kept as the
-- person wrote it; it is parsed again wherever it is used, into parameterized SQL.
CREATE TABLE segments (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    filter      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- A draft names a saved segment (read when it is sent) or carries a filter of its own; at most
-- one of the two. A segment a campaign names cannot be deleted.
ALTER TABLE campaigns ADD COLUMN segment_id bigint REFERENCES segments (id) ON DELETE RESTRICT;
ALTER TABLE campaigns ADD COLUMN audience_filter text;
ALTER TABLE campaigns ADD CONSTRAINT campaigns_one_audience_filter
    CHECK (segment_id IS NULL OR audience_filter IS NULL);

-- Invariant 7: the filter a broadcast was sent with, fixed when it starts, so every chunk of
-- its enqueue narrows by the same filter whatever happens to the segment later. NULL: no filter.
ALTER TABLE broadcasts ADD COLUMN audience_filter text;
