-- 0035: the dashboard's overview reads the last 30 days of new subscribers, departures and
-- suppressions on every visit of its home page (web/dashboard/overview.sql). Each of these
-- tables is written in time order, so a BRIN index on its time finds that window at the cost
-- of a few pages, where a scan would read every row (a million subscribers: every visit).
CREATE INDEX subscribers_created_brin ON subscribers USING brin (created_at);
CREATE INDEX subscription_events_created_brin ON subscription_events USING brin (created_at);
CREATE INDEX suppressions_created_brin ON suppressions USING brin (created_at);
