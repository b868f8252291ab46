-- 0022: public sign-up (issue 22.4). See audience/signup.py and web/signup.py.

-- A list takes sign-ups from anyone through POST /subscribe only when it is marked public
-- (`senddock lists set NAME --public`); every list starts private.
ALTER TABLE lists ADD COLUMN public boolean NOT NULL DEFAULT false;

-- The proof of consent: one row per public sign-up that opened or re-opened a membership,
-- with who asked (the client's IP as the rate limit keys it, its User-Agent), when, for which
-- list, and when the signed link was followed (NULL until then, and forever on a single
-- opt-in list, where the sign-up itself is the consent). Deleting the subscriber deletes it.
CREATE TABLE signup_consents (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscriber_id  bigint NOT NULL REFERENCES subscribers (id) ON DELETE CASCADE,
    list_id        bigint NOT NULL REFERENCES lists (id) ON DELETE CASCADE,
    requested_at   timestamptz NOT NULL DEFAULT now(),
    ip             text NOT NULL,
    user_agent     text NOT NULL DEFAULT '',
    double_opt_in  boolean NOT NULL,
    confirmed_at   timestamptz
);
CREATE INDEX signup_consents_member ON signup_consents (subscriber_id, list_id);
