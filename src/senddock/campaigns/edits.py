"""Campaigns you can change: edit a draft, clone any campaign, delete a draft, archive one.

What a broadcast sends is read from its campaign's row (compose.py, once per broadcast) and its
recipients from the campaign's lists, so once a campaign has been sent its message and lists
are fixed: an edit that would change them is refused (409, naming the reason), and a clone is
the way to send a changed copy. Its name, which no recipient sees, can always change. A
scheduled draft is refused too, until it is unscheduled, as in listmonk: the scheduler may be
enqueueing it at this moment. Each operation holds the campaign's row lock (the queue's
lock_campaign), so it and a `campaign send` or a scheduler take turns and each judges the
status the other left. Archiving is a column, not a status.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import psycopg

from senddock import queue
from senddock.audience.segment_filter import check as check_filter
from senddock.audience.segments import find as find_segment
from senddock.campaigns.campaigns import CampaignError, UnknownCampaign, check_fields, lists_of
from senddock.campaigns.layouts import NO_LAYOUT, LayoutNotFound, UnknownLayout, layout_for_campaign
from senddock.db import sql
from senddock.errors import Invalid
from senddock.messages import check_header, html_to_text
from senddock.messages.layout import bodies
from senddock.messages.tracking import Track

Conn = psycopg.Connection[dict[str, Any]]
QUERIES = sql.load(__package__, "edits.sql")

# The fields a campaign cannot be without, as a person calls them.
REQUIRED = {"name": "name", "subject": "subject", "from_addr": "From"}

# A field as a person calls it, in messages (the others by their own name).
LABELS = {
    "from_addr": "From",
    "reply_to": "Reply-To",
    "text_body": "text body",
    "html_body": "HTML body",
    "markdown_body": "Markdown body",
}

# A stored column as the CLI, the API and errors name the field (`layout`, not `layout_id`).
FIELDS = {"layout_id": "layout", "segment_id": "segment", "audience_filter": "filter"}

# A campaign's stored fields that an edit may change (its lists apart), as `current` reads them.
STORED = (
    "name",
    "subject",
    "from_addr",
    "reply_to",
    "text_body",
    "html_body",
    "markdown_body",
    "layout_id",
    "segment_id",
    "audience_filter",
    "track",
)
# The bodies and headers: a value as given, '' clearing it.
TEXTS = ("name", "subject", "from_addr", "reply_to", "text_body", "html_body", "markdown_body")


def said(changed: list[str]) -> str:
    """The fields `changed`, as a person reads them: `subject, From, lists`."""
    return ", ".join(LABELS.get(f, f) for f in changed)


# The statuses a campaign is done in: it may be archived out of the default list.
FINISHED = ("sent", "cancelled")


@dataclass(frozen=True)
class Changes:
    """What an edit sets; None leaves a field as it is. An empty reply_to, text_body,
    html_body or markdown_body clears it (a campaign still needs one body); a Markdown body
    replaces the HTML one and the other way round. `layout` is a layout's name, "none" for
    none, '' for the default one; `segment` a saved segment's name and `audience_filter` a
    filter of its own, each replacing the other, '' for neither."""

    name: str | None = None
    subject: str | None = None
    from_addr: str | None = None
    reply_to: str | None = None
    text_body: str | None = None
    html_body: str | None = None
    markdown_body: str | None = None
    layout: str | None = None
    segment: str | None = None
    audience_filter: str | None = None
    lists: Sequence[str] | None = None
    # What it tracks (messages/tracking.py Track.parse: 'opens,clicks', 'none', ...).
    track: str | None = None

    def given(self) -> list[str]:
        """The fields this edit names, in declaration order."""
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]


@dataclass(frozen=True)
class Editable:
    """A campaign's editable fields as stored (bodies included), its layout's and segment's
    names, and its list ids, in order: what an edit is judged against and its form shows."""

    name: str
    subject: str
    from_addr: str
    reply_to: str | None
    text_body: str | None
    html_body: str | None
    send_at: datetime | None
    archived_at: datetime | None
    markdown_body: str | None
    layout_id: int | None
    segment_id: int | None
    audience_filter: str | None
    layout_name: str | None
    segment_name: str | None
    list_ids: tuple[int, ...]
    track: str = ""


def current(conn: Conn, campaign_id: int) -> Editable | None:
    """A campaign's editable fields (bodies included) and list ids as stored; None if there
    is no such campaign."""
    row = conn.execute(QUERIES["fields"], {"c": campaign_id}).fetchone()
    return None if row is None else Editable(**{**row, "list_ids": tuple(row["list_ids"])})


def _locked(conn: Conn, campaign_id: int) -> tuple[queue.Campaign, Editable]:
    c = queue.lock_campaign(conn, campaign_id)
    if c is None:
        raise UnknownCampaign(f"no campaign with id {campaign_id}")
    row = current(conn, campaign_id)
    assert row is not None  # locked just now
    return c, row


def _refuse(c: queue.Campaign, row: Editable, changed: list[str]) -> None:
    """CampaignError (409) when `changed` (not only the name) would alter what a broadcast
    sends or is about to send."""
    fixed = [FIELDS.get(f, f) for f in changed if f != "name"]
    if not fixed:
        return
    what = said(fixed)
    if c.status != "draft":
        raise CampaignError(
            f"cannot change the {what} of campaign {c.id}: it is {c.status}, and what it"
            f" sends is fixed once it has been sent (only its name can change); clone it"
            f" (`senddock campaign clone {c.id}`) to send a changed copy",
            field=fixed[0],
        )
    if row.send_at is not None:
        raise CampaignError(
            f"cannot change the {what} of campaign {c.id}: it is scheduled for"
            f" {row.send_at.isoformat()}; unschedule it first"
            f" (`senddock campaign schedule {c.id} --clear`)",
            field=fixed[0],
        )


def derived_text(markdown_body: str | None) -> str | None:
    """The text body a Markdown body gets when none is given (create derives it once)."""
    if not markdown_body:
        return None
    return html_to_text(bodies(None, None, None, markdown_body)[1] or "")


def _new_fields(conn: Conn, row: Editable, changes: Changes) -> dict[str, Any]:
    """The stored fields as `changes` leaves them (not yet checked together)."""
    new = {k: getattr(row, k) for k in STORED}
    for key in changes.given():
        value = getattr(changes, key)
        if key in REQUIRED and not value.strip():
            raise Invalid(f"the campaign's {REQUIRED[key]} cannot be empty", field=key)
        if key in TEXTS:
            new[key] = value or None
    if changes.markdown_body and changes.html_body:
        raise Invalid("give an HTML body or a Markdown body, not both", field="markdown_body")
    if changes.markdown_body:
        new["html_body"] = None
    elif changes.html_body:
        new["markdown_body"] = None
    if (
        new["markdown_body"] != row.markdown_body
        and changes.text_body is None
        and row.text_body == derived_text(row.markdown_body)
    ):
        new["text_body"] = None  # derived from the old Markdown: derived again (check_fields)
    if changes.layout is not None:
        try:
            found = layout_for_campaign(conn, changes.layout or None)  # '': the default
        except UnknownLayout as exc:
            raise LayoutNotFound(exc.message, field="layout") from exc
        new["layout_id"] = found.id if found else None
    if changes.segment and changes.audience_filter:
        raise Invalid("give a segment or a filter, not both", field="filter")
    if changes.segment is not None:
        new["segment_id"] = find_segment(conn, changes.segment).id if changes.segment else None
        new["audience_filter"] = None
    if changes.track is not None:
        new["track"] = Track.parse(changes.track).stored  # Invalid naming `track`
    if changes.audience_filter is not None:
        own = changes.audience_filter.strip()
        new["audience_filter"] = check_filter(own) if own else None  # SegmentError
        if own:
            new["segment_id"] = None
    return new


def edit(conn: Conn, campaign_id: int, changes: Changes) -> list[str]:
    """Apply `changes`, checked like create (templates inside the campaign's layout against
    real subscribers, headers, addresses, lists, segment and filter); the fields that changed
    (empty: nothing did)."""
    with conn.transaction():
        c, row = _locked(conn, campaign_id)
        new = _new_fields(conn, row, changes)
        list_ids = list(row.list_ids)
        if changes.lists is not None:
            list_ids = sorted(set(lists_of(conn, changes.lists)))  # UnknownList
        changed = [k for k, v in new.items() if v != getattr(row, k)]
        if list_ids != list(row.list_ids):
            changed.append("lists")
        if not changed:
            return []
        _refuse(c, row, changed)
        if not new["text_body"] and not new["html_body"] and not new["markdown_body"]:
            raise Invalid("a campaign needs a text body, an HTML body or both", field="text_body")
        chosen = check_fields(
            conn,
            new["name"],
            list_ids,
            new["subject"],
            new["from_addr"],
            new["text_body"],
            new["html_body"],
            new["reply_to"],
            layout=new["layout_id"] if new["layout_id"] is not None else NO_LAYOUT,
            markdown_body=new["markdown_body"],
        )
        new["text_body"] = chosen.text_body
        changed = [k for k in changed if k == "lists" or new[k] != getattr(row, k)]
        conn.execute(QUERIES["update_fields"], {**new, "c": campaign_id})
        if "lists" in changed:
            conn.execute(QUERIES["drop_lists"], {"c": campaign_id})
            conn.execute(QUERIES["insert_lists"], {"c": campaign_id, "lists": list_ids})
    return [FIELDS.get(k, k) for k in changed]


def clone(conn: Conn, campaign_id: int, name: str | None = None) -> int:
    """A new draft with the message and lists of campaign `campaign_id` (whatever its status),
    named `name` or "NAME (copy)"; its id."""
    with conn.transaction():
        _, row = _locked(conn, campaign_id)
        new_name = name.strip() if name and name.strip() else f"{row.name} (copy)"
        check_header("campaign name", new_name, field="name")
        made = conn.execute(QUERIES["clone"], {"c": campaign_id, "name": new_name}).fetchone()
        assert made is not None
        conn.execute(QUERIES["clone_lists"], {"c": campaign_id, "new": made["id"]})
    return int(made["id"])


def delete(conn: Conn, campaign_id: int) -> None:
    """Delete a draft; any other campaign is refused (409): its recipients' history stays."""
    with conn.transaction():
        c, _ = _locked(conn, campaign_id)
        if c.status != "draft" or c.broadcast_id is not None:
            then = (
                f"archive it instead (`senddock campaign archive {campaign_id}`)"
                if c.status in FINISHED
                else "cancel it, then archive it"
            )
            raise CampaignError(
                f"cannot delete campaign {campaign_id}: it is {c.status}, and only a draft"
                f" can be deleted (its recipients' history stays); {then}"
            )
        conn.execute(QUERIES["delete_draft"], {"c": campaign_id})


def archive(conn: Conn, campaign_id: int, archived: bool = True) -> None:
    """Take a finished campaign out of the default list (`archived`), or put it back."""
    with conn.transaction():
        c, _ = _locked(conn, campaign_id)
        if archived and c.status not in FINISHED:
            raise CampaignError(
                f"cannot archive campaign {campaign_id}: it is {c.status}; only a sent or"
                " cancelled campaign is archived (delete a draft you do not want)"
            )
        conn.execute(QUERIES["set_archived"], {"c": campaign_id, "archived": archived})
