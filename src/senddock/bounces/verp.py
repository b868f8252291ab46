"""The return path that names the job: a signed VERP address per message. No database here.

With a bounce domain set, a message's envelope sender is `b+B.S.MAC@bounces.example.org`
(with an address set instead, `bounce@example.org` gives `bounce+B.S.MAC@example.org`): B the
broadcast, S the subscriber, MAC 80 bits of HMAC-SHA256 over both, in lowercase hex because
relays may lowercase a local part. Whatever comes back to that address names its job, and a
made-up or altered one names nobody (`read` is None), so it suppresses nobody. The local part
stays under RFC 5321's 64 octets for any pair of bigint ids (2 + 19 + 1 + 19 + 1 + 20 = 62).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

PURPOSE = b"verp"
MAC_HEX = 20
_LOCAL = re.compile(
    r"^(?P<prefix>[^+@]+)\+(?P<b>\d{1,19})\.(?P<s>\d{1,19})\.(?P<mac>[0-9a-f]{20})$"
)


def _mac(key: bytes, broadcast_id: int, subscriber_id: int) -> str:
    text = f"{int(broadcast_id)}.{int(subscriber_id)}".encode()
    return hmac.new(key, PURPOSE + b":" + text, hashlib.sha256).hexdigest()[:MAC_HEX]


@dataclass(frozen=True)
class ReturnPath:
    """Where bounces go: `b@bounces.example.org` from a domain, or an address as given."""

    prefix: str
    domain: str

    @classmethod
    def parse(cls, setting: str) -> ReturnPath:
        """From SENDDOCK_BOUNCE_DOMAIN's value; ValueError if it is neither form."""
        value = setting.strip()
        local, at, domain = value.rpartition("@")
        if not at:
            local, domain = "b", value
        if not domain or "." not in domain or not re.fullmatch(r"[A-Za-z0-9.-]+", domain):
            raise ValueError(f"bounce domain {setting!r}: give a domain or an address")
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,20}", local):
            raise ValueError(f"bounce address {setting!r}: its local part must be short and plain")
        return cls(local, domain.lower())

    def address(self, key: bytes, broadcast_id: int, subscriber_id: int) -> str:
        """The envelope sender of one job's message."""
        mac = _mac(key, broadcast_id, subscriber_id)
        return f"{self.prefix}+{int(broadcast_id)}.{int(subscriber_id)}.{mac}@{self.domain}"

    def read(self, key: bytes, address: str) -> tuple[int, int] | None:
        """(broadcast, subscriber) an address of ours names; None for anything else."""
        local, at, domain = address.strip().strip("<>").rpartition("@")
        if not at or domain.lower() != self.domain:
            return None
        found = _LOCAL.match(local.lower())
        if found is None or found["prefix"] != self.prefix.lower():
            return None
        broadcast_id, subscriber_id = int(found["b"]), int(found["s"])
        if not hmac.compare_digest(found["mac"], _mac(key, broadcast_id, subscriber_id)):
            return None
        return broadcast_id, subscriber_id
