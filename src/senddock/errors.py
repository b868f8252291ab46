"""The one error type: a failure the person asking caused, or can fix, in one line.

Raised where it happens, it carries what every surface needs: the status an HTTP client gets
(`status`), the input it is about (`field`, a form or JSON field name, or None) and the line a
person reads (`message`). The CLI prints `error: <message>` and exits non-zero; the API answers
`{"error": {"field": ..., "message": ...}}` with the status; the dashboard shows the message
(web/errors.py). Nothing above this module maps exception classes to statuses or guesses a
field from the words of a message.

    NotFound   404  no such id
    Conflict   409  not possible in the current state (a campaign already sent)
    Invalid    422  bad input; `field` names it
    Unavailable 503 the server is not set up for it (no link key yet)

A subclass names the domain (UnknownCampaign, InvalidAddress) and keeps the standard base
callers already catch (ValueError, LookupError, OSError).
"""

from __future__ import annotations

from typing import ClassVar


class SendDockError(Exception):
    """An expected failure: `status`, `field` and a one-line `message`."""

    status: ClassVar[int] = 422

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    @property
    def message(self) -> str:
        """The text on one line (a template error may quote several)."""
        return " ".join(str(self).split())


class Invalid(SendDockError):
    """Bad input: `field` names it when one field is at fault."""

    status = 422


class NotFound(SendDockError):
    """No such id."""

    status = 404


class Conflict(SendDockError):
    """Not possible in the current state."""

    status = 409


class Unavailable(SendDockError):
    """The server is not set up for it yet: not the client's fault."""

    status = 503
