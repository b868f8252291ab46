"""Test and demo helpers: an SMTP server that records what it receives and injects faults."""

from senddock.testing.catcher import (
    Catcher,
    Fault,
    FaultKind,
    FaultRule,
    Received,
    convention_fault,
    message_id_of,
)

__all__ = [
    "Catcher",
    "Fault",
    "FaultKind",
    "FaultRule",
    "Received",
    "convention_fault",
    "message_id_of",
]
