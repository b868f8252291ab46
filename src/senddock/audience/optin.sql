-- The statements of double opt-in (audience/optin.py): who waits for a confirmation link, and
-- the confirmation itself.

-- name: unconfirmed
-- The double opt-in lists an address is still unconfirmed on (one confirmation request each),
-- the address matched case-insensitively (one subscriber per address).
SELECT s.id AS subscriber_id, s.email, s.name, l.id AS list_id, l.name AS list_name, l.from_addr
FROM list_memberships m
JOIN subscribers s ON s.id = m.subscriber_id JOIN lists l ON l.id = m.list_id
WHERE lower(s.email) = lower(%s) AND m.status = 'unconfirmed' AND l.double_opt_in
ORDER BY l.name

-- name: about
-- The membership a confirmation link names, as the page that answers it shows it.
SELECT s.email, l.name AS list_name, m.status
FROM list_memberships m
JOIN subscribers s ON s.id = m.subscriber_id JOIN lists l ON l.id = m.list_id
WHERE m.subscriber_id = %s AND m.list_id = %s

-- name: confirm_membership
-- Only an unconfirmed membership becomes confirmed: following an old link never undoes an
-- unsubscribe. Idempotent.
UPDATE list_memberships SET status = 'confirmed', updated_at = now()
WHERE subscriber_id = %s AND list_id = %s AND status = 'unconfirmed'
