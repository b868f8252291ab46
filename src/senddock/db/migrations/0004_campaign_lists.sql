-- 0004: a campaign targets one or more lists; each address is sent to once.
CREATE TABLE campaign_lists (
    campaign_id bigint NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    list_id     bigint NOT NULL REFERENCES lists (id),
    PRIMARY KEY (campaign_id, list_id)
);
INSERT INTO campaign_lists (campaign_id, list_id) SELECT id, list_id FROM campaigns
ON CONFLICT DO NOTHING;
