-- 0011: a campaign's lists are campaign_lists (0004) alone. campaigns.list_id, from 0001, held
-- the first of them only: the unsubscribe page read it and named one list of a two-list
-- campaign, and an unsubscribe left that one list alone. Nothing reads or writes it now.
-- Not additive: a process of an older version still writes it when it creates a campaign, so
-- stop those before migrating (the campaign_lists rows were copied by 0004).
ALTER TABLE campaigns DROP COLUMN list_id;
