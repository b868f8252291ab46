"""Test sends: a campaign's message, rendered as for a subscriber, to a few given addresses.

No broadcast, no job rows, no retries: the caller sends them with delivery.oneoff.send and
shows the relay's reply to the person at once.
"""

from __future__ import annotations

import secrets
from typing import Any

import psycopg

from senddock.audience.addresses import normalize
from senddock.campaigns.audience import audience, list_ids
from senddock.campaigns.compose import campaign_message, recipient_for
from senddock.campaigns.layouts import first_recipient
from senddock.messages import LinkSettings, OneOff, Recipient
from senddock.messages.render import SampleAttributes


def build(
    conn: psycopg.Connection[dict[str, Any]],
    campaign_id: int,
    addresses: list[str],
    links: LinkSettings,
) -> list[OneOff]:
    """The campaign's message for each address, each about its (normalized) address. Built
    here, sent by the caller (delivery.oneoff.send): campaigns never open an SMTP session.

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
        rendered.append(OneOff(address, sender, address, message.render(rcpt, mid)))
    return rendered


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
