-- Subscribers as CSV for `subscribers export`, the API and the dashboard (audience/export.py).
-- Each is read through a server-side cursor so memory stays flat at any size. The suppressed
-- flag is an EXISTS on lower(email), the same test the claim uses (invariant: a suppressed
-- address is never sent), so an export shows who a broadcast would skip. `{audience}` is a
-- segment filter over `s` (audience/segment_filter.py: placeholders only; `true` without one).

-- name: members
-- Every member of one list, with the membership's status, in subscriber id order.
SELECT s.email, s.name, m.status, s.attributes,
       EXISTS (SELECT 1 FROM suppressions x WHERE lower(x.email) = lower(s.email)) AS suppressed
FROM list_memberships m JOIN subscribers s ON s.id = m.subscriber_id
WHERE m.list_id = %(list)s AND {audience}
ORDER BY s.id;

-- name: everyone
-- Every subscriber, with the subscriber's own status (active or bounced), in id order. Erased
-- ones (0031) hold nothing of anyone and are left out.
SELECT s.email, s.name, s.status, s.attributes,
       EXISTS (SELECT 1 FROM suppressions x WHERE lower(x.email) = lower(s.email)) AS suppressed
FROM subscribers s
WHERE s.status <> 'erased' AND {audience}
ORDER BY s.id;
