"""Email address checks (syntax only: no DNS look-ups at import time).

email-validator decides; a fast path gives the same answer for the common shape
(an ASCII dot-atom local part at a domain already judged), which makes a million-row
import spend its time in the database rather than here.
"""

from __future__ import annotations

import re

from email_validator import EmailNotValidError, validate_email

from senddock.errors import Invalid

# RFC 5322 dot-atom text: what email-validator accepts unchanged as an ASCII local part.
_DOT_ATOM = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*\Z")
# Domain (as written) -> its normalized form, or None when email-validator refuses it.
_domains: dict[str, str | None] = {}
_DOMAIN_CACHE = 50_000


class InvalidAddress(Invalid, ValueError):
    """Not a usable email address (422, about the field the address came in)."""


def _slow(address: str, field: str = "email") -> str:
    try:
        return validate_email(address, check_deliverability=False).normalized
    except EmailNotValidError as exc:
        raise InvalidAddress(f"invalid address {address!r}: {exc}", field=field) from exc


def _domain(domain: str) -> str | None:
    if domain not in _domains:
        if len(_domains) >= _DOMAIN_CACHE:
            _domains.clear()
        try:
            _domains[domain] = validate_email("a@" + domain, check_deliverability=False).domain
        except EmailNotValidError:
            _domains[domain] = None
    return _domains[domain]


def normalize(address: str, field: str = "email") -> str:
    """The address in canonical form; InvalidAddress with the reason if it is not one, about
    the input `field`."""
    address = address.strip()
    local, at, domain = address.rpartition("@")
    fast = at and len(local) <= 64 and len(address) <= 254 and domain.isascii()
    if fast and _DOT_ATOM.match(local):
        ok = _domain(domain)
        if ok is not None and len(local) + 1 + len(ok) <= 254:
            return f"{local}@{ok}"
    return _slow(address, field)
