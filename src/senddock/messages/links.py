"""Signed per-recipient links (unsubscribe, preferences), built with HMAC-SHA256. No database.

A token is `<ids>.<mac>`: the ids in the clear (subscriber, campaign) and 128 bits of
HMAC-SHA256 over a purpose and the ids. Without the key nobody can make one for another
subscriber, and changing any character of it makes it invalid.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import NamedTuple, Protocol
from urllib.parse import quote

UNSUBSCRIBE = "unsubscribe"
PREFERENCES = "preferences"
_TOKEN = re.compile(r"^(\d{1,19}(?:\.\d{1,19})*)\.([A-Za-z0-9_-]{22})$")


class LinkSettings(Protocol):
    """What links need of the settings: where they point and what signs them. config.Settings
    has it (SENDDOCK_PUBLIC_URL, SENDDOCK_SECRET_KEY, SENDDOCK_UNSUBSCRIBE_MAILTO); this
    package reads no environment of its own."""

    @property
    def public_url(self) -> str: ...

    @property
    def secret_key(self) -> str | None: ...

    @property
    def unsubscribe_mailto(self) -> str | None: ...


def _mac(key: bytes, purpose: str, ids: str) -> str:
    digest = hmac.new(key, f"{purpose}:{ids}".encode(), hashlib.sha256).digest()[:16]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def sign(key: bytes, purpose: str, *ids: int) -> str:
    """A token for `purpose` that carries `ids`."""
    text = ".".join(str(int(i)) for i in ids)
    return f"{text}.{_mac(key, purpose, text)}"


class Signer:
    """`sign` with one key, its HMAC state made once: a token costs about half (each tracked
    link of each message is one: messages/tracking.py)."""

    def __init__(self, key: bytes) -> None:
        self._keyed = hmac.new(key, digestmod=hashlib.sha256)

    def sign(self, purpose: str, *ids: int) -> str:
        text = ".".join(str(int(i)) for i in ids)
        mac = self._keyed.copy()
        mac.update(f"{purpose}:{text}".encode())
        return f"{text}.{base64.urlsafe_b64encode(mac.digest()[:16]).rstrip(b'=').decode()}"


def verify(key: bytes, purpose: str, token: str) -> tuple[int, ...] | None:
    """The ids a token carries if it was made with `key` for `purpose`; None if not."""
    m = _TOKEN.match(token)
    if m is None:
        return None
    ids, mac = m.groups()
    if not hmac.compare_digest(mac, _mac(key, purpose, ids)):
        return None
    return tuple(int(i) for i in ids.split("."))


class Unsubscribe(NamedTuple):
    """One recipient's unsubscribe link, for the body, and List-Unsubscribe header value."""

    url: str
    header: str


@dataclass(frozen=True)
class Links:
    """The links of one campaign's messages: base URL, signing key, mailto address."""

    base_url: str
    key: bytes
    campaign_id: int
    mailto: str

    def token(self, subscriber_id: int) -> str:
        return sign(self.key, UNSUBSCRIBE, subscriber_id, self.campaign_id)

    def preferences(self, subscriber_id: int) -> str:
        """The subscriber's preference page (its own purpose: an unsubscribe token opens no
        page that can join lists)."""
        token = sign(self.key, PREFERENCES, subscriber_id, self.campaign_id)
        return f"{self.base_url.rstrip('/')}/preferences/{token}"

    def unsubscribe(self, subscriber_id: int) -> Unsubscribe:
        """The subscriber's unsubscribe URL and List-Unsubscribe value, from one signature.

        The value is folded: the https URL first, then the mailto (RFC 2369)."""
        token = self.token(subscriber_id)
        url = f"{self.base_url.rstrip('/')}/unsubscribe/{token}"
        subject = quote(f"unsubscribe {token}")
        return Unsubscribe(url, f"<{url}>,\r\n <mailto:{self.mailto}?subject={subject}>")
