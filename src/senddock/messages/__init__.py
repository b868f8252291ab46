"""Templates, message bytes and signed links. Knows nothing about the database."""

from senddock.messages.html_text import html_to_text
from senddock.messages.links import PREFERENCES, UNSUBSCRIBE, Links, LinkSettings, sign, verify
from senddock.messages.oneoff import OneOff
from senddock.messages.render import (
    AddressProblem,
    CompiledMessage,
    HeaderError,
    Recipient,
    TemplateProblem,
    check_header,
    compile_message,
    one_mailbox,
    wire_address,
)

__all__ = [
    "PREFERENCES",
    "UNSUBSCRIBE",
    "AddressProblem",
    "CompiledMessage",
    "HeaderError",
    "LinkSettings",
    "Links",
    "OneOff",
    "Recipient",
    "TemplateProblem",
    "check_header",
    "compile_message",
    "html_to_text",
    "one_mailbox",
    "sign",
    "verify",
    "wire_address",
]
