-- The sample a template is checked against at create (campaigns/template_check.py).

-- name: subscribers
-- Up to n subscribers of the lists, read along the membership key (cheap on any list): the
-- attribute names a template may use are those real subscribers have.
SELECT s.id, s.email, s.name, s.attributes FROM subscribers s
WHERE s.id IN (SELECT m.subscriber_id FROM list_memberships m
               WHERE m.list_id = ANY(%(lists)s::bigint[])
               ORDER BY m.subscriber_id LIMIT %(n)s)
