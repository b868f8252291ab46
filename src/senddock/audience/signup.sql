-- Public sign-up (audience/signup.py): who may sign up to which list, the membership a
-- sign-up opens, and its consent row. Nothing here may tell the caller whether the address
-- was known: every path runs the same statements and answers the same way.

-- name: public_list
-- The list a sign-up form names, only while it is public (a list made private again closes
-- its forms at once), with what its answer and its confirmation request need.
SELECT id, name, double_opt_in, from_addr, consent_text FROM lists WHERE id = %(list)s AND public;

-- name: set_public
-- Open or close a list's sign-up form (`lists set --public/--private`); NULL leaves it.
UPDATE lists SET public = coalesce(%(public)s, public) WHERE id = %(list)s;

-- name: suppressed
-- Whether the address is suppressed, case ignored (the claim's own test): a suppressed
-- address is never written to nor mailed by a sign-up; nor is one whose erasure kept it
-- suppressed (erased_suppressions, 0031: its SHA-256).
SELECT EXISTS (SELECT 1 FROM suppressions WHERE lower(email) = lower(%(email)s))
       OR EXISTS (SELECT 1 FROM erased_suppressions
                  WHERE digest = sha256(convert_to(lower(%(email)s), 'UTF8'))) AS suppressed;

-- name: subscriber
-- The subscriber of an address, made if new. An existing subscriber's name is never changed
-- by a stranger's form: DO UPDATE only touches nothing (email = email) so that the row comes
-- back in one statement whether or not it was there, and two sign-ups at once get one id.
INSERT INTO subscribers (email, name) VALUES (%(email)s, %(name)s)
ON CONFLICT ((lower(email))) DO UPDATE SET email = subscribers.email
RETURNING id;

-- name: open_membership
-- Join the list: unconfirmed on a double opt-in list, confirmed otherwise. An existing
-- membership stays as it is, except that a member who left a double opt-in list may ask again
-- (unsubscribed -> unconfirmed: nothing is sent to them until they follow the new link). A
-- member who left a single opt-in list stays left: nobody else's form may put them back.
-- The row comes back only when this sign-up opened or re-opened it, or it still waits for
-- its confirmation (so a lost request can be asked for again).
INSERT INTO list_memberships AS m (list_id, subscriber_id, status)
VALUES (%(list)s, %(subscriber)s,
        CASE WHEN %(double_opt_in)s THEN 'unconfirmed' ELSE 'confirmed' END)
ON CONFLICT (list_id, subscriber_id) DO UPDATE SET
    status = EXCLUDED.status, updated_at = now()
WHERE EXCLUDED.status = 'unconfirmed' AND m.status IN ('unconfirmed', 'unsubscribed')
RETURNING status;

-- name: record_consent
-- The proof of consent for a membership this sign-up opened: when, from which IP, with which
-- User-Agent, on which list, and the words agreed to (the list's wording of this moment, 0032).
INSERT INTO signup_consents (subscriber_id, list_id, ip, user_agent, double_opt_in, consent_text)
VALUES (%(subscriber)s, %(list)s, %(ip)s, %(user_agent)s, %(double_opt_in)s, %(consent_text)s);

-- name: request_row
-- What the confirmation request of one membership needs (optin.request_message).
SELECT s.id AS subscriber_id, s.email, s.name, l.id AS list_id, l.name AS list_name, l.from_addr
FROM list_memberships m
JOIN subscribers s ON s.id = m.subscriber_id JOIN lists l ON l.id = m.list_id
WHERE m.subscriber_id = %(subscriber)s AND m.list_id = %(list)s AND m.status = 'unconfirmed';

-- name: confirm_consent
-- The link was followed: the latest consent row of that membership that waits for it gets
-- its confirmation time, in the transaction that confirms the membership. Earlier requests
-- stay unconfirmed (they are the proof of what was asked, not of what was confirmed).
WITH latest AS (
    SELECT id FROM signup_consents
    WHERE subscriber_id = %(subscriber)s AND list_id = %(list)s AND confirmed_at IS NULL
    ORDER BY id DESC LIMIT 1
)
UPDATE signup_consents c SET confirmed_at = now() FROM latest WHERE c.id = latest.id;

-- name: public_list_any
-- A list by id, public or not (`lists form ID` names it; the form works once it is public).
SELECT id FROM lists WHERE id = %(list)s;

-- name: set_consent_text
-- A list's sign-up consent wording (0032); NULL: the default wording.
UPDATE lists SET consent_text = %(text)s WHERE id = %(list)s;

