-- 0031: erasure on request (GDPR article 17; audience/erasure.py). Additive only.

-- An erased subscriber whose row must stay (jobs name it, so the campaign counts and
-- recipients stay whole) keeps nothing of the person: its address becomes
-- `erased-<id>@erased.invalid`, its name and attributes empty, its status `erased`, which no
-- enqueue takes (it takes `active` only) and no bounce turns back into `bounced`.
ALTER TABLE subscribers DROP CONSTRAINT subscribers_status_check;
ALTER TABLE subscribers ADD CONSTRAINT subscribers_status_check
    CHECK (status IN ('active', 'bounced', 'erased'));
ALTER TABLE subscribers ADD COLUMN erased_at timestamptz;

-- A suppression that must outlive the erasure of its address (the person asked never to be
-- mailed again): the SHA-256 of the lower-cased address, never the address. The enqueue and
-- a sign-up test an address against it as they test `suppressions`.
CREATE TABLE erased_suppressions (
    digest      bytea PRIMARY KEY,
    reason      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- A sign-up's proof of consent outlives its list (issue 35: lists can be deleted): the row
-- keeps its time, IP and User-Agent with no list, where 0022 deleted it with the list.
ALTER TABLE signup_consents ALTER COLUMN list_id DROP NOT NULL;
ALTER TABLE signup_consents DROP CONSTRAINT signup_consents_list_id_fkey;
ALTER TABLE signup_consents ADD CONSTRAINT signup_consents_list_id_fkey
    FOREIGN KEY (list_id) REFERENCES lists (id) ON DELETE SET NULL;
