"""Email address checks (syntax only: no DNS look-ups at import time)."""

from __future__ import annotations

from email_validator import EmailNotValidError, validate_email


class InvalidAddress(ValueError):
    """Not a usable email address."""


def normalize(address: str) -> str:
    """The address in canonical form; InvalidAddress with the reason if it is not one."""
    try:
        return validate_email(address.strip(), check_deliverability=False).normalized
    except EmailNotValidError as exc:
        raise InvalidAddress(f"invalid address {address!r}: {exc}") from exc
