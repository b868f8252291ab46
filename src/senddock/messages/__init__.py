"""Templates and message bytes. Knows nothing about the database."""

from senddock.messages.render import (
    CompiledMessage,
    HeaderError,
    Recipient,
    TemplateProblem,
    check_header,
    compile_message,
)

__all__ = [
    "CompiledMessage",
    "HeaderError",
    "Recipient",
    "TemplateProblem",
    "check_header",
    "compile_message",
]
