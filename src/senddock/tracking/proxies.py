"""The machines that announce themselves (issue 37, item 3a): image proxies and link scanners
known by their User-Agent or their address. One table, matched case-insensitively; the work
per request is bounded (one compiled regex over at most MAX_AGENT characters, one membership
test over a handful of networks). Pure: no I/O.

Sources (as of 2026-12-07; none could be fetched from this machine, so each entry is what the
named party documents, written from that documentation):

- Apple Mail Privacy Protection: Apple fetches remote images through its own proxies, from
  Apple's network 17.0.0.0/8 (ARIN NET-17-0-0-0-1, Apple Inc., AS714). Its User-Agent is the
  generic Mail one ("Mozilla/5.0 ... AppleWebKit/605.1.15 (KHTML, like Gecko)"), which Apple
  Mail itself also sends when a person opens the message on a Mac: the agent alone is no
  evidence, the address is. Refresh: `whois -h whois.arin.net 'n 17.0.0.0'` and Apple's
  published egress list (https://mask-api.icloud.com/egress-ip-ranges.csv, iCloud Private
  Relay: the same infrastructure) and replace APPLE_NETWORKS.
- Google Image Proxy (Gmail): "... (via ggpht.com GoogleImageProxy)".
- Yahoo and AOL Mail (one platform): "YahooMailProxy; https://help.yahoo.com/kb/...".
- Microsoft: "BingPreview" (Outlook.com/Safe Links previews), "Microsoft Office Existence
  Discovery" (Office clients checking that a link exists before opening it).
- Mail security gateways that name themselves: Barracuda, Mimecast, Proofpoint.
- Link unfurlers that fetch a link pasted into a chat: Slackbot, facebookexternalhit,
  Twitterbot, LinkedInBot, Discordbot, WhatsApp, TelegramBot, SkypeUriPreview.

Refresh: edit AGENTS and APPLE_NETWORKS here (each with its source) and the test table in
tests/test_tracking_evidence.py.
"""

from __future__ import annotations

import ipaddress
import re

MAX_AGENT = 500  # characters of a User-Agent looked at (and kept: tracking/events.py)

# (pattern, why): the first that matches names the machine.
AGENTS: tuple[tuple[str, str], ...] = (
    (r"GoogleImageProxy", "Google image proxy"),
    (r"YahooMailProxy", "Yahoo/AOL image proxy"),
    (r"BingPreview", "Microsoft link preview (BingPreview)"),
    (r"Microsoft Office Existence Discovery", "Microsoft Office link check"),
    (r"Barracuda", "Barracuda link scanner"),
    (r"Mimecast", "Mimecast link scanner"),
    (r"Proofpoint", "Proofpoint link scanner"),
    (
        r"Slackbot|facebookexternalhit|Twitterbot|LinkedInBot|Discordbot|WhatsApp|TelegramBot"
        r"|SkypeUriPreview",
        "link preview bot",
    ),
)
APPLE_NETWORKS = (ipaddress.ip_network("17.0.0.0/8"),)

_AGENT = re.compile("|".join(f"(?P<a{i}>{p})" for i, (p, _) in enumerate(AGENTS)), re.I)


def known_machine(user_agent: str, host: str | None) -> str | None:
    """Why a request is a known proxy's or scanner's, or None (see the module)."""
    found = _AGENT.search(user_agent[:MAX_AGENT])
    if found is not None and found.lastgroup is not None:
        return AGENTS[int(found.lastgroup[1:])][1]
    try:
        ip = ipaddress.ip_address(host or "")
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if any(ip in net for net in APPLE_NETWORKS):
        return "Apple Mail Privacy Protection (Apple's address)"
    return None
