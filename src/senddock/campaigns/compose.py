"""A campaign's message as the senders see it: its templates, its headers, its signed links.

One place builds it, for the worker (once per broadcast), for `campaign preview` and for the
web pages that check links: they all sign with the same key, so a link made by one is accepted
by the others.
"""

from __future__ import annotations

import email.utils
import functools
from collections.abc import Callable
from typing import Any

import psycopg

from senddock import tracking
from senddock.bounces.verp import ReturnPath
from senddock.campaigns.campaigns import CampaignError, UnknownCampaign
from senddock.db import sql
from senddock.errors import Invalid, Unavailable
from senddock.messages import (
    CompiledMessage,
    HeaderError,
    Links,
    LinkSettings,
    Recipient,
    TemplateProblem,
    compile_message,
)
from senddock.messages.html_text import html_to_text
from senddock.messages.layout import Layout, bodies
from senddock.messages.tracking import Rewritten, Track, Tracker, rewrite

QUERIES = sql.load(__package__, "compose.sql")


class NoLinkKey(Unavailable, RuntimeError):
    """Neither SENDDOCK_SECRET_KEY nor a stored key: the schema predates migration 0003."""


def _key(stored: dict[str, Any] | None, settings: LinkSettings) -> bytes:
    if settings.secret_key:
        return settings.secret_key.encode()
    if stored is None:
        raise NoLinkKey("no link signing key: run 'senddock migrate' or set SENDDOCK_SECRET_KEY")
    return str(stored["value"]).encode()


def link_key(conn: psycopg.Connection[dict[str, Any]], settings: LinkSettings) -> bytes:
    """The key that signs and checks links."""
    if settings.secret_key:
        return settings.secret_key.encode()
    return _key(conn.execute(QUERIES["link_key"]).fetchone(), settings)


def build(
    row: dict[str, Any],
    key: bytes,
    settings: LinkSettings,
    tracked: tuple[Rewritten, Tracker] | None = None,
) -> tuple[CompiledMessage, str]:
    """(compiled message, envelope sender) of a campaign row; `tracked`: its templates with
    their links rewritten and what signs them (a broadcast's message, `tracked_bodies`)."""
    envelope_from = email.utils.parseaddr(str(row["from_addr"]))[1]
    links = Links(
        base_url=settings.public_url,
        key=key,
        campaign_id=int(row["id"]),
        mailto=settings.unsubscribe_mailto or envelope_from,
    )
    text, html = message_bodies(row)
    tracker = None
    if tracked is not None:
        text, html, tracker = tracked[0].text, tracked[0].html, tracked[1]
    message = compile_message(
        row["subject"],
        row["from_addr"],
        text,
        html,
        reply_to=row["reply_to"],
        links=links,
        tracker=tracker,
    )
    return message, envelope_from


def tracked_bodies(row: dict[str, Any], settings: LinkSettings) -> Rewritten | None:
    """A tracked campaign row's templates with their links rewritten (messages/tracking.py);
    None when it tracks nothing. The text part is derived from the HTML first when it has
    none, so both parts name the same links."""
    track = Track.parse(row.get("track"))
    if not track:
        return None
    text, html = message_bodies(row)
    if not text:
        text = html_to_text(html or "")
    return rewrite(text, html, track, settings.public_url)


def message_bodies(row: dict[str, Any]) -> tuple[str | None, str | None]:
    """(text, HTML) templates of a campaign row: its body (Markdown made HTML) in its layout."""
    layout = Layout(row["layout_html"], row["layout_text"]) if row.get("layout_html") else None
    return bodies(layout, row["text_body"], row["html_body"], row.get("markdown_body"))


def for_campaign(
    conn: psycopg.Connection[dict[str, Any]], campaign_id: int, settings: LinkSettings
) -> tuple[CompiledMessage, str] | None:
    """The compiled message of a campaign; None if there is no such campaign."""
    row = conn.execute(QUERIES["message_of_campaign"], {"id": campaign_id}).fetchone()
    if row is None:
        return None
    return build(row, link_key(conn, settings), settings)


async def for_broadcast(
    conn: psycopg.AsyncConnection[dict[str, Any]],
    broadcast_id: int,
    settings: LinkSettings,
    return_path: ReturnPath | None = None,
) -> tuple[CompiledMessage, Callable[[int], str]] | None:
    """The compiled message of a broadcast's campaign and its envelope sender by subscriber
    (the worker's way in): the From address, or with a return path each job's own VERP
    address, signed with the link key (bounces/verp.py; the bounce readers use the same)."""
    cur = await conn.execute(QUERIES["message_of_broadcast"], {"id": broadcast_id})
    row = await cur.fetchone()
    if row is None:
        return None
    stored = None
    if not settings.secret_key:
        stored = await (await conn.execute(QUERIES["link_key"])).fetchone()
    key = _key(stored, settings)
    tracked = None
    rewritten = tracked_bodies(row, settings)
    if rewritten is not None:
        # The links' URLs are stored before any message names them (tracking/links.py).
        ids = await tracking.store(conn, broadcast_id, rewritten.urls)
        track = Track.parse(row["track"])
        tracker = Tracker(settings.public_url, key, broadcast_id, ids, track.opens, track.anonymous)
        tracked = (rewritten, tracker)
    try:
        message, envelope_from = build(row, key, settings, tracked)
    except HeaderError as exc:  # checked at create; only a hand-edited row gets here
        raise TemplateProblem(str(exc), field=exc.field) from exc
    if return_path is None:
        return message, lambda _subscriber: envelope_from
    return message, functools.partial(return_path.address, key, broadcast_id)


def recipient_for(conn: psycopg.Connection[dict[str, Any]], address: str) -> Recipient:
    """A subscriber as a Recipient; any other address as a subscriber with no data (id 0,
    whose unsubscribe link unsubscribes nobody)."""
    row = conn.execute(QUERIES["subscriber"], (address.strip(),)).fetchone()
    if row is None:
        return Recipient(address.strip(), "", {}, 0)
    return Recipient(row["email"], row["name"], row["attributes"] or {}, int(row["id"]))


class NotARecipient(Invalid, CampaignError):
    """A preview for an address that is not on the campaign's lists: it would render blanks
    (422, about the field `to`)."""


def member_of(
    conn: psycopg.Connection[dict[str, Any]], campaign_id: int, address: str
) -> Recipient:
    """The subscriber `address` as a Recipient, if they are on one of the campaign's lists."""
    row = conn.execute(QUERIES["member"], {"c": campaign_id, "a": address.strip()}).fetchone()
    if row is None or row["id"] is None:
        lists = f" ({row['lists']})" if row and row["lists"] else ""
        raise NotARecipient(
            f"{address.strip()} is not a subscriber of campaign {campaign_id}'s lists{lists}:"
            " its preview would have no name or attributes; `campaign test --to` sends to any"
            " address",
            field="to",
        )
    return Recipient(row["email"], row["name"], row["attributes"] or {}, int(row["id"]))


def campaign_message(
    conn: psycopg.Connection[dict[str, Any]], campaign_id: int, settings: LinkSettings
) -> tuple[CompiledMessage, str]:
    """(compiled message, envelope sender) of a campaign; UnknownCampaign if there is none."""
    built = for_campaign(conn, campaign_id, settings)
    if built is None:
        raise UnknownCampaign(f"no campaign with id {campaign_id}")
    return built


def preview(
    conn: psycopg.Connection[dict[str, Any]],
    campaign_id: int,
    address: str,
    settings: LinkSettings,
) -> bytes:
    """The message campaign `campaign_id` would send to `address`, a subscriber on its lists,
    rendered now (NotARecipient for anyone else)."""
    message, _ = campaign_message(conn, campaign_id, settings)
    mid = f"<preview.{campaign_id}@{message.from_domain}>"
    return message.render(member_of(conn, campaign_id, address), mid)
