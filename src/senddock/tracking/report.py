"""A campaign's opens and clicks as every surface shows them (issue 37): people and events,
human and machine apart, and a click count per link. Read from the events, on the caller's
connection (campaign status reads it in its own snapshot)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from senddock.db import sql

QUERIES = sql.load(__package__, "report.sql")


@dataclass(frozen=True)
class LinkClicks:
    """One tracked link: human clicks, the people who made them (None: anonymous), machine
    clicks."""

    url: str
    clicks: int
    unique: int | None
    machine: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "clicks": self.clicks,
            "unique": self.unique,
            "machine": self.machine,
        }


@dataclass(frozen=True)
class Engagement:
    """`opened` and `clicked` count people (a job once, however often), judged human;
    `opened_machine` and `clicked_machine` the people with a machine event (its why on the
    event: tracking/events.py); a person with both a human and a machine open counts in
    `opened` and in `opened_machine`. `opens` and `clicks` every human event,
    `*_machine_events` every machine one. Requests for the hidden trap link count in none.
    People are None for an anonymous campaign: its events name nobody."""

    opened: int | None = 0
    clicked: int | None = 0
    opened_machine: int | None = 0
    clicked_machine: int | None = 0
    opens: int = 0
    clicks: int = 0
    opens_machine_events: int = 0
    clicks_machine_events: int = 0
    links: tuple[LinkClicks, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The keys of `campaign status --json` and the API, in their order."""
        return {
            "opened": self.opened,
            "clicked": self.clicked,
            "opened_machine": self.opened_machine,
            "clicked_machine": self.clicked_machine,
            "opens": self.opens,
            "clicks": self.clicks,
            "opens_machine_events": self.opens_machine_events,
            "clicks_machine_events": self.clicks_machine_events,
            "links": [link.as_dict() for link in self.links],
        }


def engagement(
    conn: psycopg.Connection[dict[str, Any]], broadcast_id: int | None, anonymous: bool = False
) -> Engagement:
    """The figures of a broadcast (all zero before it exists); `anonymous`: people unknown."""
    if broadcast_id is None:
        return Engagement()
    by_kind = {str(r["kind"]): r for r in conn.execute(QUERIES["totals"], {"b": broadcast_id})}
    links = tuple(
        LinkClicks(
            str(r["url"]),
            int(r["clicks"]),
            None if anonymous else int(r["unique_people"]),
            int(r["machine"]),
        )
        for r in conn.execute(QUERIES["links"], {"b": broadcast_id})
    )

    def n(kind: str, column: str) -> int:
        row = by_kind.get(kind)
        return int(row[column]) if row else 0

    if anonymous:
        return Engagement(
            None,
            None,
            None,
            None,
            opens=n("open", "events"),
            clicks=n("click", "events"),
            opens_machine_events=n("open", "machine_events"),
            clicks_machine_events=n("click", "machine_events"),
            links=links,
        )

    return Engagement(
        opened=n("open", "people"),
        clicked=n("click", "people"),
        opened_machine=n("open", "machine_people"),
        clicked_machine=n("click", "machine_people"),
        opens=n("open", "events"),
        clicks=n("click", "events"),
        opens_machine_events=n("open", "machine_events"),
        clicks_machine_events=n("click", "machine_events"),
        links=links,
    )
