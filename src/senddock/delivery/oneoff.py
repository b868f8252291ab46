"""One-off messages (messages.OneOff) sent now: a campaign's test send, a double opt-in
confirmation request.

The one place outside the workers that opens an SMTP session. Those who build such a message
(campaigns/trial.py, audience/optin.py) never send it: the command or the route at the top
builds it, hands it here, and shows or records the relay's reply. No job row, no retry, no
outcome rules: the person who asked sees the reply at once.

The messages go over one session to the first relay of SENDDOCK_SMTP_URL, in order. A relay
that cannot be reached (no session: delivery/servers.py `connection_failed`) hands the message
and those after it to the next relay of the setting; the last one's failure is the reply.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from senddock.config import Settings, SmtpTarget
from senddock.delivery.servers import connection_failed
from senddock.messages import OneOff
from senddock.smtp import Reply, SmtpSession


def send(settings: Settings, messages: Sequence[OneOff]) -> list[tuple[str, Reply]]:
    """Send each message now: (its `about`, the relay's reply), in order. Never raises for an
    SMTP or network failure: the reply says it. ValueError for a bad SENDDOCK_SMTP_URL."""
    if not messages:
        return []
    targets = SmtpTarget.parse_all(settings.smtp_url)
    return asyncio.run(_send(targets, settings.smtp_timeout, messages))


async def _send(
    targets: list[SmtpTarget], timeout: float, messages: Sequence[OneOff]
) -> list[tuple[str, Reply]]:
    relays = iter(targets)
    session = _session(next(relays), timeout)
    replies = []
    try:
        for m in messages:
            reply = await session.send(m.sender, m.recipient, m.data)
            while connection_failed(reply) and (target := next(relays, None)) is not None:
                await session.quit()
                session = _session(target, timeout)
                reply = await session.send(m.sender, m.recipient, m.data)
            replies.append((m.about, reply))
    finally:
        await session.quit()
    return replies


def _session(target: SmtpTarget, timeout: float) -> SmtpSession:
    return SmtpSession(target, timeout, verify_certs=target.verify)
