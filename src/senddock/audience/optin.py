"""Double opt-in: a signed confirmation link per (subscriber, list), and the request that
carries it. `senddock serve` answers the link; only confirmed members are ever sent campaigns.
"""

from __future__ import annotations

import email.policy
import email.utils
from collections.abc import Sequence
from dataclasses import dataclass
from email.headerregistry import Address
from email.message import EmailMessage
from typing import Any

import psycopg

from senddock.db import sql
from senddock.messages import LinkSettings, OneOff, sign, wire_address

CONFIRM = "confirm"
Conn = psycopg.Connection[dict[str, Any]]

QUERIES = sql.load(__package__, "optin.sql")


def confirm_url(links: LinkSettings, key: bytes, subscriber_id: int, list_id: int) -> str:
    token = sign(key, CONFIRM, subscriber_id, list_id)
    return f"{links.public_url.rstrip('/')}/confirm/{token}"


@dataclass(frozen=True)
class Awaiting:
    """One membership that waits for its confirmation, as its request is mailed: who, on
    which list, from which sender (optin.sql unconfirmed, signup.sql request_row)."""

    subscriber_id: int
    email: str
    name: str
    list_id: int
    list_name: str
    from_addr: str  # a double opt-in list has one (lists_opt_in_has_sender)


def request_message(row: Awaiting, url: str) -> bytes:
    """The confirmation request for one unconfirmed membership."""
    msg = EmailMessage()
    # One mailbox, rebuilt from its parts: a From stored before it was checked
    # (messages.one_mailbox) never carries a second address into the header.
    name, sender = email.utils.parseaddr(row.from_addr)
    msg["From"] = email.utils.formataddr((" ".join(name.split()), sender), charset="utf-8")
    # An IDNA domain in A-labels; a non-ASCII local part is written in UTF-8 (RFC 6532), as
    # the SMTPUTF8 transaction that carries it allows (the To of "zoë@bücher.example").
    to = wire_address(row.email)
    local, _, domain = to.rpartition("@")
    msg["To"] = Address(" ".join(str(row.name).split()), local, domain)
    msg["Subject"] = f"Please confirm your subscription to {' '.join(row.list_name.split())}"
    msg["Date"] = email.utils.formatdate(usegmt=True)
    domain = email.utils.parseaddr(row.from_addr)[1].rsplit("@", 1)[-1]
    msg["Message-ID"] = email.utils.make_msgid("sd.confirm", domain=domain)
    msg.set_content(
        f"Someone (we hope you) asked to receive {row.list_name} at {row.email}.\n\n"
        f"To confirm, open this link and press the button:\n\n{url}\n\n"
        "If this was not you, ignore this message: you will get nothing more.\n"
    )
    return msg.as_bytes(policy=email.policy.SMTP if to.isascii() else email.policy.SMTPUTF8)


def waiting(conn: Conn, address: str) -> list[Awaiting]:
    """The unconfirmed memberships of `address`, as `requests` mails them (read them, give the
    connection back, then send: no connection waits on the relay)."""
    rows = conn.execute(QUERIES["unconfirmed"], (address.strip(),)).fetchall()
    return [Awaiting(**r) for r in rows]


def requests(rows: Sequence[Awaiting], key: bytes, links: LinkSettings) -> list[OneOff]:
    """The confirmation request of each unconfirmed membership row (as `waiting` reads them),
    each about its list's name. Built here, sent by the caller (delivery.oneoff.send): the
    audience layer never opens an SMTP session."""
    built = []
    for row in rows:
        url = confirm_url(links, key, row.subscriber_id, row.list_id)
        sender = email.utils.parseaddr(row.from_addr)[1]
        built.append(OneOff(row.list_name, sender, row.email, request_message(row, url)))
    return built


@dataclass(frozen=True)
class Pending:
    """What a confirmation link is about, as its page shows it: the address, the list's
    name, and the membership's status (unconfirmed, confirmed, unsubscribed)."""

    email: str
    list_name: str
    status: str


def about(conn: Conn, subscriber_id: int, list_id: int) -> Pending | None:
    """The address, list and membership status a confirmation link is about."""
    row = conn.execute(QUERIES["about"], (subscriber_id, list_id)).fetchone()
    return Pending(**row) if row else None


def confirm(conn: Conn, subscriber_id: int, list_id: int) -> bool:
    """Confirm the membership; False if it was not waiting for confirmation."""
    return conn.execute(QUERIES["confirm_membership"], (subscriber_id, list_id)).rowcount == 1
