"""What one SMTP attempt ended with: the reply (or network error) and the stage it came at.

The transport (senddock/smtp/session.py) makes one; delivery/outcome.py judges it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ENHANCED = re.compile(r"^\s*([245])\.(\d{1,3})\.(\d{1,3})\b")

# What Postgres text cannot hold besides NUL: a lone surrogate (the SMTP decoders keep a byte
# that is not UTF-8 as one, U+DC80-U+DCFF).
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Reply:
    """What one attempt ended with: a server reply, or a network error (code None).

    Its text is kept with the job, the suppression and the broadcast, so it is made storable
    here: a byte that is not UTF-8 becomes U+FFFD and NUL is dropped (a relay answering in
    Latin-1 would otherwise make its outcome impossible to write, and the outcomes of its group
    with it)."""

    stage: str
    code: int | None
    text: str

    def __post_init__(self) -> None:
        if not self.text.isascii() or "\x00" in self.text:
            text = _SURROGATE.sub("\ufffd", self.text.replace("\x00", ""))
            object.__setattr__(self, "text", text)

    @property
    def accepted(self) -> bool:
        """The server took the message: a 2xx to its DATA."""
        return self.stage == "data" and self.code is not None and 200 <= self.code < 300

    @property
    def enhanced(self) -> str | None:
        """The RFC 3463 enhanced status code at the start of the text, if any."""
        m = _ENHANCED.match(self.text)
        return f"{m.group(1)}.{m.group(2)}.{m.group(3)}" if m else None

    def summary(self) -> str:
        code = f"{self.code} " if self.code is not None else ""
        return f"{self.stage}: {code}{self.text}".strip()
