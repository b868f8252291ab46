"""Test sends: a campaign's message, rendered as for a subscriber, to a few given addresses.

No broadcast, no job rows, no retries: the relay's reply is shown to the person at once.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import psycopg

from senddock.audience.addresses import normalize
from senddock.campaigns.compose import campaign_message, recipient_for
from senddock.config import Settings, SmtpTarget
from senddock.messages import LinkSettings
from senddock.smtp import Reply, SmtpSession


def send_test(
    conn: psycopg.Connection[dict[str, Any]],
    campaign_id: int,
    addresses: list[str],
    settings: Settings,
    links: LinkSettings,
) -> list[tuple[str, Reply]]:
    """Send the rendered message to each address over one SMTP session: (address, reply).

    Each address is rendered as its subscriber if it is one (name, attributes, own link).
    """
    message, sender = campaign_message(conn, campaign_id, links)
    token = secrets.token_hex(4)
    rendered = []
    for n, raw in enumerate(addresses):
        address = normalize(raw)
        mid = f"<test.{campaign_id}.{token}.{n}@{message.from_domain}>"
        rendered.append((address, message.render(recipient_for(conn, address), mid)))

    async def send_all() -> list[tuple[str, Reply]]:
        target = SmtpTarget.parse(settings.smtp_url)
        session = SmtpSession(target, settings.smtp_timeout, verify_certs=target.verify)
        try:
            return [(a, await session.send(sender, a, data)) for a, data in rendered]
        finally:
            await session.quit()

    return asyncio.run(send_all())
