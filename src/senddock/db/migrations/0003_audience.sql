-- 0003: compliant messages and the audience around them (issue 4).

-- The key that signs unsubscribe and confirmation links, made once, here, so a self-hoster
-- needs no setup; SENDDOCK_SECRET_KEY overrides it. gen_random_uuid() draws from the server's
-- strong random source: two of them give 244 random bits.
CREATE TABLE app_secrets (
    name        text PRIMARY KEY,
    value       text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO app_secrets (name, value)
VALUES ('link_key', replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''));

-- Reply-To is optional; the text body may be left out and derived from the HTML.
ALTER TABLE campaigns ADD COLUMN reply_to text;
ALTER TABLE campaigns ALTER COLUMN text_body DROP NOT NULL;
ALTER TABLE campaigns ADD CONSTRAINT campaigns_has_body
    CHECK (text_body IS NOT NULL OR html_body IS NOT NULL);

-- When a membership last changed (an unsubscribe, a confirmation).
ALTER TABLE list_memberships ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();

-- Scheduling: a draft with a send_at is enqueued by the scheduler once due. Why a due
-- campaign could not be enqueued (nobody to send to) is kept for the person to see.
ALTER TABLE campaigns ADD COLUMN send_at timestamptz;
ALTER TABLE campaigns ADD COLUMN schedule_error text;
CREATE INDEX campaigns_due ON campaigns (send_at) WHERE status = 'draft' AND send_at IS NOT NULL;

-- Double opt-in per list: a subscriber added to such a list is `unconfirmed` until they
-- follow the signed link of the confirmation request, sent from the list's address.
ALTER TABLE lists ADD COLUMN double_opt_in boolean NOT NULL DEFAULT false;
ALTER TABLE lists ADD COLUMN from_addr text;
ALTER TABLE lists ADD CONSTRAINT lists_opt_in_has_sender
    CHECK (NOT double_opt_in OR from_addr IS NOT NULL);

-- Bumped whenever jobs of a broadcast go back to the queue from a final state
-- (`campaign retry-failed`), so a finish that read the queue before can tell it is stale.
ALTER TABLE broadcasts ADD COLUMN generation integer NOT NULL DEFAULT 0;
