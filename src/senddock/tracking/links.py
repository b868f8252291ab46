"""Where tracked links go: stored per broadcast when its message is compiled, read by the
redirect (issue 37). A click's token names a row here by id; the URL is never taken from a
request, so no link leads anywhere a message did not."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import psycopg

from senddock.db import sql

QUERIES = sql.load(__package__, "links.sql")

AsyncConn = psycopg.AsyncConnection[dict[str, Any]]
Conn = psycopg.Connection[dict[str, Any]]


async def store(conn: AsyncConn, broadcast_id: int, urls: Sequence[str]) -> tuple[int, ...]:
    """The ids of a broadcast's tracked URLs, in the order given, stored if new."""
    if not urls:
        return ()
    params = {"b": broadcast_id, "urls": list(urls)}
    await conn.execute(QUERIES["store"], params)
    rows = await (await conn.execute(QUERIES["ids"], params)).fetchall()
    ids = {str(r["url"]): int(r["id"]) for r in rows}
    return tuple(ids[u] for u in urls)


class Targets:
    """The URLs of links, by (broadcast, link id), read once and kept (at most `size`, the
    least recently used dropped first): a redirect reads Postgres only the first time a serve
    process sees a link, so it keeps answering while Postgres is briefly away."""

    def __init__(self, size: int = 50_000) -> None:
        self.size = size
        self._known: OrderedDict[tuple[int, int], str] = OrderedDict()
        self._lock = threading.Lock()  # read() runs on the request thread pool

    def cached(self, broadcast_id: int, link_id: int) -> str | None:
        key = (broadcast_id, link_id)
        with self._lock:
            url = self._known.get(key)
            if url is not None:
                self._known.move_to_end(key)
            return url

    def read(self, conn: Conn, broadcast_id: int, link_id: int) -> str | None:
        """The link's URL from the database (raises what psycopg raises when it is away);
        None when there is no such link of that broadcast."""
        row = conn.execute(QUERIES["target"], {"id": link_id, "b": broadcast_id}).fetchone()
        if row is None:
            return None
        url = str(row["url"])
        with self._lock:
            self._known[(broadcast_id, link_id)] = url
            if len(self._known) > self.size:
                self._known.popitem(last=False)
        return url
