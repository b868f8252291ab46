"""Test sends: a campaign's message, rendered as for a subscriber, to a few given addresses.

No broadcast, no job rows, no retries: the relay's reply is shown to the person at once.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import psycopg

from senddock.audience.addresses import normalize
from senddock.campaigns.audience import audience, list_ids
from senddock.campaigns.compose import campaign_message, recipient_for
from senddock.campaigns.layouts import first_recipient
from senddock.config import Settings, SmtpTarget
from senddock.messages import LinkSettings, Recipient
from senddock.messages.render import SampleAttributes
from senddock.smtp import Reply, SmtpSession


def send_test(
    conn: psycopg.Connection[dict[str, Any]],
    campaign_id: int,
    addresses: list[str],
    settings: Settings,
    links: LinkSettings,
) -> list[tuple[str, Reply]]:
    """Send the rendered message to each address over one SMTP session: (address, reply).

    Each address is rendered as its subscriber if it is one (name, attributes, own link);
    any other address with the name and attributes of the first of the campaign's audience,
    never as a blank subscriber 0 (issue 35), and without links: a test's reader (a colleague,
    a seed inbox) must not hold a working unsubscribe link of a real subscriber. With nobody
    on the lists, as "Sample".
    """
    message, sender = campaign_message(conn, campaign_id, links)
    token = secrets.token_hex(4)
    rendered = []
    for n, raw in enumerate(addresses):
        address = normalize(raw)
        mid = f"<test.{campaign_id}.{token}.{n}@{message.from_domain}>"
        rcpt = recipient_for(conn, address)
        if rcpt.subscriber_id == NOBODY:
            rcpt = _as_sample(conn, campaign_id, address)
        rendered.append((address, message.render(rcpt, mid)))

    async def send_all() -> list[tuple[str, Reply]]:
        target = SmtpTarget.parse(settings.smtp_url)
        session = SmtpSession(target, settings.smtp_timeout, verify_certs=target.verify)
        try:
            return [(a, await session.send(sender, a, data)) for a, data in rendered]
        finally:
            await session.quit()

    return asyncio.run(send_all())


# The subscriber id compose.recipient_for gives an address that is no subscriber's.
NOBODY = 0


def _as_sample(
    conn: psycopg.Connection[dict[str, Any]], campaign_id: int, address: str
) -> Recipient:
    """`address` dressed in the name and attributes of the first subscriber the campaign would
    go to now, with no subscriber id: no unsubscribe or preference link is signed for it."""
    who = audience(conn, campaign_id)
    sample = first_recipient(conn, list_ids(conn, campaign_id), who.filter)
    if sample is None:
        return Recipient(address, "Sample", SampleAttributes(), None)
    return Recipient(address, sample.name, sample.attributes, None)
