-- A broadcast's tracked links (tracking/links.py): written by the workers that compile its
-- message, read by the redirect.

-- name: store
-- The URLs of a broadcast's message, in order of appearance, each stored once: workers that
-- compile the same message at once (or again after a restart) agree, since a URL already
-- stored keeps its row and its id. Safe to run twice (the worker retries it after a fault).
INSERT INTO tracked_links (broadcast_id, position, url)
SELECT %(b)s, t.position, t.url
FROM unnest(%(urls)s::text[]) WITH ORDINALITY AS t(url, position)
ON CONFLICT (broadcast_id, url) DO NOTHING

-- name: ids
-- The ids of those URLs, to sign into each message's links.
SELECT id, url FROM tracked_links WHERE broadcast_id = %(b)s AND url = ANY(%(urls)s::text[])

-- name: target
-- Where a click's link goes: the row its token names, of the broadcast its token names (a
-- token of one broadcast never reaches another's link).
SELECT url FROM tracked_links WHERE id = %(id)s AND broadcast_id = %(b)s
