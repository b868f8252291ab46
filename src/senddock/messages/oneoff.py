"""A one-off message ready to go (a test send, a confirmation request): built by campaigns/ or
audience/, sent by delivery/oneoff.py from the command or route at the top."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OneOff:
    """Its envelope, its bytes, and what it is about for the person who sees the relay's reply
    (the test's address, the list a confirmation request is for)."""

    about: str
    sender: str
    recipient: str
    data: bytes
