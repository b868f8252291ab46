-- A subscriber's consent record (audience/consent.py): what they agreed to and what they
-- changed since, as stored by the sign-up form (0022) and the preference page (0023).

-- name: signups
-- Each public sign-up that opened or re-opened a membership: when, from which IP, with which
-- User-Agent, to which list (its current name; NULL if the list was deleted since), single or
-- double opt-in, when the confirmation link was followed, and the words agreed to (0032; ''
-- for a sign-up from before they were kept). Oldest first.
SELECT c.id, c.requested_at, c.ip, c.user_agent, c.double_opt_in, c.confirmed_at,
       c.list_id, l.name AS list_name, c.consent_text
FROM signup_consents c LEFT JOIN lists l ON l.id = c.list_id
WHERE c.subscriber_id = %(s)s
ORDER BY c.requested_at, c.id;

-- name: events
-- Each change they made themselves (join, leave, unsubscribe from everything), from where,
-- following which campaign's link, when. Oldest first.
SELECT e.id, e.created_at, e.action, e.source, e.campaign_id, e.list_id, l.name AS list_name
FROM subscription_events e LEFT JOIN lists l ON l.id = e.list_id
WHERE e.subscriber_id = %(s)s
ORDER BY e.created_at, e.id;
