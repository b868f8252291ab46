"""Email address checks (syntax only: no DNS look-ups at import time).

email-validator decides; a fast path gives the same answer for the common shape
(an ASCII dot-atom local part at a domain already judged), which makes a million-row
import spend its time in the database rather than here. It is imported where it judges, not
with this module: every process's settings check configures this module, and a worker that
only sends judges no address.

Reserved domains (issue 22, part 8): an address under a name no public mail server delivers
to is refused with that reason, unless SENDDOCK_ALLOW_RESERVED_DOMAINS is set (internal relays
and test setups use them): `.test`, `.invalid`, `.localhost` (RFC 2606, RFC 6761), `.local`
(RFC 6762, multicast DNS), `.internal` (ICANN's private-use name, 2024), `.onion` (RFC 7686),
`.alt` (RFC 9476) and `.arpa` (RFC 6761, `home.arpa` RFC 8375). `.example` and example.com,
.net and .org are accepted as any name: RFC 6761 section 6.5 says applications should not
treat them as special (their null MX makes a relay refuse them at once). The setting is one
per process, set where the Settings are read (`configure`).
"""

from __future__ import annotations

import functools
import re

from senddock.errors import Invalid

# RFC 5322 dot-atom text: what email-validator accepts unchanged as an ASCII local part.
_DOT_ATOM = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*\Z")
# Domain (as written) -> its normalized form, or None when email-validator refuses it.
_domains: dict[str, str | None] = {}
_DOMAIN_CACHE = 50_000


# Reserved top-level names (see the module docstring), with where each is reserved.
RESERVED = {
    "test": "RFC 6761",
    "invalid": "RFC 6761",
    "localhost": "RFC 6761",
    "local": "RFC 6762, multicast DNS",
    "internal": "ICANN, private use",
    "onion": "RFC 7686",
    "alt": "RFC 9476",
    "arpa": "RFC 6761, RFC 8375",
}
_allow_reserved = False


class InvalidAddress(Invalid, ValueError):
    """Not a usable email address (422, about the field the address came in)."""


def configure(allow_reserved: bool) -> None:
    """This process's policy on reserved domains (SENDDOCK_ALLOW_RESERVED_DOMAINS), set once
    where its Settings are read (the CLI, `serve`)."""
    global _allow_reserved
    _allow_reserved = allow_reserved


@functools.lru_cache(maxsize=_DOMAIN_CACHE)
def reserved_suffix(domain: str) -> str | None:
    """The reserved top-level name `domain` is under (as written), or None."""
    top = domain.rpartition(".")[2].lower()
    return domain[-len(top) :] if top in RESERVED else None


def _slow(address: str, field: str = "email") -> str:
    local, _, domain = address.rpartition("@")
    suffix = reserved_suffix(domain)
    if suffix is not None and not _allow_reserved:
        raise InvalidAddress(
            f"invalid address {address!r}: .{suffix.lower()} is a reserved domain"
            f" ({RESERVED[suffix.lower()]}) that no public mail server delivers to; set"
            " SENDDOCK_ALLOW_RESERVED_DOMAINS=1 to accept it (internal relays, tests)",
            field=field,
        )
    if suffix is not None:
        # email-validator refuses special-use names outright: it judges the same address with
        # the reserved name swapped for letters of the same length, which we then swap back.
        stand_in = "a" * len(suffix)
        head = domain[: -len(suffix)]
        checked = _valid(f"{local}@{head}{stand_in}", address, field)
        return checked[: -len(stand_in)] + suffix.lower()
    return _valid(address, address, field)


def _valid(candidate: str, address: str, field: str) -> str:
    from email_validator import EmailNotValidError, validate_email

    try:
        return validate_email(candidate, check_deliverability=False).normalized
    except EmailNotValidError as exc:
        raise InvalidAddress(f"invalid address {address!r}: {exc}", field=field) from exc


def _domain(domain: str) -> str | None:
    if domain not in _domains:
        from email_validator import EmailNotValidError, validate_email

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
    if fast and _DOT_ATOM.match(local) and reserved_suffix(domain) is None:
        ok = _domain(domain)
        if ok is not None and len(local) + 1 + len(ok) <= 254:
            return f"{local}@{ok}"
    return _slow(address, field)
