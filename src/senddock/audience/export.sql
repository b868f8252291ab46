-- A list's members for `subscribers export` (audience/export.py).

-- name: members
-- Every member of one list with its suppression flag, in subscriber id order, read through a
-- server-side cursor so memory stays flat at any size. The flag is an EXISTS on lower(email),
-- the same test the claim uses (invariant: a suppressed address is never sent), so an export
-- shows who a broadcast would skip.
SELECT s.email, s.name, m.status, s.attributes,
       EXISTS (SELECT 1 FROM suppressions x WHERE lower(x.email) = lower(s.email)) AS suppressed
FROM list_memberships m JOIN subscribers s ON s.id = m.subscriber_id
WHERE m.list_id = %(list)s ORDER BY s.id;
