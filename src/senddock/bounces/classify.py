"""What a failed recipient's reply means for the address: pure rules, no I/O.

| kind        | what it says                                     | effect                        |
|-------------|--------------------------------------------------|-------------------------------|
| `hard`      | the address does not exist or never takes mail:  | suppress (reason `bounced`)   |
|             | unknown user or host, no MX / null MX, moved,    |                               |
|             | disabled (5.1.x, 5.2.1, 5.4.4, their words)      |                               |
| `soft`      | mailbox full, over quota, temporary, gave up     | counted; N in a window        |
|             | after retrying (x.2.2, 4.x.x, their words)       | suppress it                   |
| `policy`    | about us, not the recipient: blocked, spam,      | nobody suppressed; counted    |
|             | content, reputation, authentication, relaying    | on the campaign               |
|             | denied (x.7.x, x.3.4, x.6.x, their words)        |                               |
| `complaint` | an abuse report (ARF) or a provider's complaint  | suppress (reason `complaint`) |

Policy is judged first: one misconfigured relay or one blocklisting must never read as a
list full of dead addresses. Then soft, then hard; a permanent failure none of the rules name
is hard (a DSN says `Action: failed` about that recipient), a temporary one soft.
"""

from __future__ import annotations

import re
from typing import Literal

Kind = Literal["hard", "soft", "policy", "complaint", "none"]

# Enhanced status codes (RFC 3463) by what they are about.
POLICY_STATUS = re.compile(r"^[45]\.(7\.\d+|3\.4|6\.\d+)$")
SOFT_STATUS = re.compile(r"^([45]\.2\.2|[45]\.2\.3|4\.\d+\.\d+)$")
HARD_STATUS = re.compile(r"^5\.(1\.\d+|2\.1|4\.4|4\.1|0\.0)$")

POLICY_WORDS = re.compile(
    r"spam|blocked|block ?list|blacklist|\bdenylist|\brbl\b|spamhaus|barracuda|reputation"
    r"|policy|prohibited|rejected for policy|relay(ing)? (access )?denied|not permitted to relay"
    r"|unable to relay|\bdmarc\b|\bspf\b|\bdkim\b|authentication|content rejected"
    r"|message (content )?rejected|suspicious|virus|malware|too many (messages|connections)"
    r"|rate limit|throttl|not authori[sz]ed to send|sender (address )?rejected|access denied",
    re.IGNORECASE,
)
SOFT_WORDS = re.compile(
    r"quota|mailbox (is )?full|mailbox full|full mailbox|insufficient (system )?storage"
    r"|out of (disk )?space|temporar|try again later|too busy|exceeded storage"
    r"|maximum (time|age)|time limit|expired|retry time",
    re.IGNORECASE,
)
HARD_WORDS = re.compile(
    r"user unknown|unknown user|no such (user|mailbox|recipient|address|account)"
    r"|does not exist|doesn't exist|not exist|invalid (recipient|mailbox|address)"
    r"|unknown (recipient|mailbox|address)"
    r"|mailbox (unavailable|not found|disabled)|account (has been )?(disabled|closed|deleted)"
    r"|no longer (active|valid|available)|host (or domain name )?not found|unrouteable"
    r"|no mx|null mx|domain (not found|does not accept mail)|not our customer|unknown host"
    r"|user not found|bad destination|moved",
    re.IGNORECASE,
)

STATUS_IN_TEXT = re.compile(r"\b([245])\.(\d{1,3})\.(\d{1,3})\b")
REPLY_IN_TEXT = re.compile(r"(?<![\d.])([245]\d\d)(?:[ :-]|$)")


def status_in(text: str) -> str | None:
    """The first enhanced status code (`5.1.1`) written in a text, if any."""
    found = STATUS_IN_TEXT.search(text)
    return ".".join(found.groups()) if found else None


def reply_in(text: str) -> str | None:
    """The first SMTP reply code (`550`) written in a text, if any."""
    found = REPLY_IN_TEXT.search(text)
    return found.group(1) if found else None


def classify(status: str | None, reply: str | None, diagnostic: str | None) -> Kind:
    """The kind of one failed recipient (see the module's table)."""
    words = diagnostic or ""
    if (status and POLICY_STATUS.match(status)) or POLICY_WORDS.search(words):
        # "5.1.1 user unknown" mentioning a "policy" page would be hard: the status decides
        # when it names the address itself.
        if status and status.startswith("5.1.") and HARD_WORDS.search(words):
            return "hard"
        return "policy"
    if status and SOFT_STATUS.match(status):
        return "soft"
    if SOFT_WORDS.search(words) and not (status and HARD_STATUS.match(status)):
        return "soft"
    if status and HARD_STATUS.match(status):
        return "hard"
    temporary = (status or "").startswith("4") or (reply or "").startswith("4")
    if temporary:
        return "soft"
    return "hard"
