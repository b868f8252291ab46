"""What `senddock demo` runs on, and the tests and the chaos harness (tests/) build on: an SMTP
server that records what it receives and injects faults, the proof at that server, and
`senddock worker` subprocesses."""

from senddock.testing.catcher import (
    Catcher,
    Fault,
    FaultKind,
    FaultRule,
    Received,
    convention_fault,
    message_id_of,
)
from senddock.testing.proof import Proof, at_server
from senddock.testing.workers import WorkerProcess

__all__ = [
    "Catcher",
    "Fault",
    "FaultKind",
    "FaultRule",
    "Proof",
    "Received",
    "WorkerProcess",
    "at_server",
    "convention_fault",
    "message_id_of",
]
