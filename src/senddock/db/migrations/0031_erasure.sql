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
-- mailed again): the SHA-256 of the lower-cased address, never the address.
CREATE TABLE erased_suppressions (
    digest      bytea PRIMARY KEY,
    reason      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- The address comes back only when someone puts it in `subscribers` again (an import, `add`,
-- an address change): then, in that statement, it is suppressed as any address is, so the
-- enqueue, the claim and every page test it as they always did and the hot statements test no
-- digest (bench/erasure.py: testing digests in the enqueue cost it 45% with 1,000 kept).
-- Statement triggers over the rows written; with no digest kept they end at the first line.
-- (A sign-up tests the digest before it writes anything: audience/signup.sql `suppressed`.)
CREATE FUNCTION senddock_resuppress_erased() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM erased_suppressions) THEN
        RETURN NULL;
    END IF;
    INSERT INTO suppressions (email, reason, detail)
    SELECT n.email, 'manual', 'erased on request earlier; asked never to be mailed again'
    FROM written n
    JOIN erased_suppressions d ON d.digest = sha256(convert_to(lower(n.email), 'UTF8'))
    ON CONFLICT ((lower(email))) DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER subscribers_resuppress_inserted AFTER INSERT ON subscribers
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION senddock_resuppress_erased();
CREATE TRIGGER subscribers_resuppress_updated AFTER UPDATE ON subscribers
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION senddock_resuppress_erased();

-- A sign-up's proof of consent outlives its list (issue 35: lists can be deleted): the row
-- keeps its time, IP and User-Agent with no list, where 0022 deleted it with the list.
ALTER TABLE signup_consents ALTER COLUMN list_id DROP NOT NULL;
ALTER TABLE signup_consents DROP CONSTRAINT signup_consents_list_id_fkey;
ALTER TABLE signup_consents ADD CONSTRAINT signup_consents_list_id_fkey
    FOREIGN KEY (list_id) REFERENCES lists (id) ON DELETE SET NULL;
