"""Passwords out of text: what a log line, an error message or a printed setting may show.

Standard library only: `senddock worker`'s supervisor formats its log lines with it and must
not load what config.py loads (pydantic).
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["MIN_LITERAL", "hide_password", "passwords", "redact"]

# Where a password sits: `scheme://user:PASSWORD@host` (to the last `@` of the URL, so a raw
# `@` or `/` in it is hidden too, even where urlsplit fails), `?password=` or `&password=`, and
# libpq's `password=` keyword (quoted or not).
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^:@/?#\s\"']*:)(?P<pw>[^\s\"']*)@")
_KEYWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|[^\s&#\"']+)")


def hide_password(url: str) -> str:
    """A database or SMTP URL, or libpq keyword string, with its password replaced by ***."""
    url = _USERINFO.sub(r"\g<head>***@", url)
    return _KEYWORD.sub(r"\g<head>***", url)


def passwords(url: str) -> list[str]:
    """The passwords a URL or libpq keyword string carries, as written and decoded."""
    found = [m["pw"] for m in _USERINFO.finditer(url)]
    found += [m["pw"].strip("'") for m in _KEYWORD.finditer(url)]
    found += [unquote(pw) for pw in found]
    return sorted({pw for pw in found if pw}, key=len, reverse=True)


def redact(text: str, *urls: str) -> str:
    """`text` (an error message, a log line) with every password of `urls`, and any password
    in a URL it quotes, replaced by ***."""
    for url in urls:
        for pw in passwords(url):
            if len(pw) >= MIN_LITERAL:
                text = text.replace(pw, "***")
    return hide_password(text)


# A password shorter than this is hidden where it stands in a URL or keyword string, not
# wherever its letters occur (a one-letter password would turn every message into stars).
MIN_LITERAL = 3
