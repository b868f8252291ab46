"""Our Message-ID, which names its job to whoever returns it, and proves it. No database here.

`<sd.BROADCAST.SUBSCRIBER.TOKEN@domain>`, fixed at enqueue (queue/jobs.sql, enqueue) so every
attempt of a job carries the same one (invariant 9). TOKEN is 128 bits of HMAC-SHA256 over
"BROADCAST.SUBSCRIBER" with the Message-ID key (app_secrets.message_id_key, migration 0028),
in lowercase hex: no recipient can make another recipient's, so a bounce or a complaint that
quotes it is about that job (invariant 10). Postgres computes it at enqueue from the key's two
padded forms (RFC 2104: sha256(opad || sha256(ipad || text))), so the enqueue stays one
set-based statement. A Message-ID from before 0028 (8 hex characters per broadcast, shared by
every recipient) names nobody: any recipient of that broadcast could have written it.
"""

from __future__ import annotations

import hashlib
import hmac
import re

TOKEN_HEX = 32
_MESSAGE_ID = re.compile(r"^<?sd\.([1-9]\d{0,18})\.([1-9]\d{0,18})\.([0-9a-f]{32})@[^>\s]+>?$")
_BLOCK = 64  # SHA-256's block size


def key_pads(key: bytes) -> tuple[bytes, bytes]:
    """HMAC-SHA256's inner and outer padded keys (RFC 2104), for the enqueue's SQL."""
    if len(key) > _BLOCK:
        key = hashlib.sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    return bytes(k ^ 0x36 for k in key), bytes(k ^ 0x5C for k in key)


def token(key: bytes, broadcast_id: int, subscriber_id: int) -> str:
    """The per-recipient token of one job's Message-ID (what the enqueue's SQL computes)."""
    text = f"{int(broadcast_id)}.{int(subscriber_id)}".encode()
    return hmac.new(key, text, hashlib.sha256).hexdigest()[:TOKEN_HEX]


def names(key: bytes, message_id: str) -> tuple[int, int] | None:
    """(broadcast, subscriber) our Message-ID names when its token holds; None otherwise (not
    ours, made up, altered, or one from before migration 0028)."""
    found = _MESSAGE_ID.match(message_id.strip().lower())
    if found is None:
        return None
    broadcast_id, subscriber_id = int(found[1]), int(found[2])
    if not hmac.compare_digest(found[3], token(key, broadcast_id, subscriber_id)):
        return None
    return broadcast_id, subscriber_id
