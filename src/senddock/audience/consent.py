"""A subscriber's consent record (GDPR article 7: the controller shows that the person
consented): every sign-up with its time, IP, User-Agent, list and confirmation (0022), and
every change they made on their preference page or by one click (0023), oldest first.

Read by `senddock subscribers consent`, GET /api/v1/subscribers/{id}/consent and the
subscriber's dashboard page; written out as JSON, or as one CSV of both kinds of rows whose
cells a spreadsheet takes as text (audience/cells.py).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TextIO

import psycopg

from senddock.audience import cells
from senddock.db import sql

Conn = psycopg.Connection[dict[str, Any]]

QUERIES = sql.load(__package__, "consent.sql")

CSV_COLUMNS = (
    "kind",
    "at",
    "list",
    "action",
    "source",
    "ip",
    "user_agent",
    "double_opt_in",
    "confirmed_at",
    "campaign_id",
    "consent_text",
)


@dataclass(frozen=True)
class Signup:
    """One public sign-up: the proof of consent to one list."""

    requested_at: datetime
    ip: str
    user_agent: str
    double_opt_in: bool
    confirmed_at: datetime | None
    list_id: int | None
    list_name: str | None
    consent_text: str = ""  # the words agreed to ('' : from before 0032 kept them)


@dataclass(frozen=True)
class Event:
    """One change the subscriber made: join, leave or unsubscribe_all (list None)."""

    created_at: datetime
    action: str
    source: str
    campaign_id: int | None
    list_id: int | None
    list_name: str | None


@dataclass(frozen=True)
class ConsentRecord:
    subscriber_id: int
    email: str
    signups: list[Signup] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The record as JSON-ready values (times in ISO 8601)."""

        def iso(value: datetime | None) -> str | None:
            return value.isoformat() if value else None

        return {
            "subscriber_id": self.subscriber_id,
            "email": self.email,
            "signups": [
                {
                    "requested_at": iso(s.requested_at),
                    "ip": s.ip,
                    "user_agent": s.user_agent,
                    "double_opt_in": s.double_opt_in,
                    "confirmed_at": iso(s.confirmed_at),
                    "list_id": s.list_id,
                    "list": s.list_name,
                    "consent_text": s.consent_text,
                }
                for s in self.signups
            ],
            "events": [
                {
                    "at": iso(e.created_at),
                    "action": e.action,
                    "source": e.source,
                    "campaign_id": e.campaign_id,
                    "list_id": e.list_id,
                    "list": e.list_name,
                }
                for e in self.events
            ],
        }

    def write_json(self, out: TextIO) -> None:
        json.dump(self.as_json(), out, ensure_ascii=False, indent=2)
        out.write("\n")

    def write_csv(self, out: TextIO) -> None:
        """Both kinds of rows in one table (`kind` is signup or event), in time order."""
        rows: list[tuple[datetime, list[Any]]] = []
        for s in self.signups:
            values: list[Any] = ["signup", s.requested_at.isoformat(), s.list_name or ""]
            values += ["", "sign-up form"]
            values += [s.ip, s.user_agent, "yes" if s.double_opt_in else "no"]
            values += [s.confirmed_at.isoformat() if s.confirmed_at else "", "", s.consent_text]
            rows.append((s.requested_at, values))
        for e in self.events:
            values = ["event", e.created_at.isoformat(), e.list_name or "", e.action, e.source]
            values += ["", "", "", "", e.campaign_id or "", ""]
            rows.append((e.created_at, values))
        w = csv.writer(out)
        w.writerow(CSV_COLUMNS)
        for _, values in sorted(rows, key=lambda r: r[0]):
            w.writerow(cells.row(values))


def record(conn: Conn, subscriber_id: int, email: str) -> ConsentRecord:
    """The consent record of subscriber `subscriber_id` (whose address is `email`)."""
    signups = conn.execute(QUERIES["signups"], {"s": subscriber_id}).fetchall()
    events = conn.execute(QUERIES["events"], {"s": subscriber_id}).fetchall()
    return ConsentRecord(
        subscriber_id,
        email,
        [
            Signup(
                r["requested_at"],
                r["ip"],
                r["user_agent"],
                r["double_opt_in"],
                r["confirmed_at"],
                r["list_id"],
                r["list_name"],
                r["consent_text"],
            )
            for r in signups
        ],
        [
            Event(
                r["created_at"],
                r["action"],
                r["source"],
                r["campaign_id"],
                r["list_id"],
                r["list_name"],
            )
            for r in events
        ],
    )
