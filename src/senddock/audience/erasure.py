"""Erasure on request (GDPR article 17): a subscriber's address, name, attributes, consent and
preference history leave every table now, not after retention.

What goes, in one transaction:

  subscribers           deleted; or, when jobs name them, kept as `erased-<id>@erased.invalid`
                        with no name, no attributes, status `erased` (no enqueue takes it)
  broadcast_jobs        the address becomes that stand-in; a reply that quotes it loses its
                        text; jobs not sent yet (pending, retry, unconfirmed) are cancelled
  list_memberships, signup_consents, subscription_events   deleted
  track_events          their opens and clicks kept for the campaign's totals, unnamed and
                        without their User-Agent (issue 37)
  bounce_findings       address, reply and diagnostic gone; kind, status and job kept
  bounce_messages       the raw bytes of every message that reported on them, or that names
                        the address and was never read into a finding, gone (digest kept)
  import_jobs           rejected-row notes that quote the address
  suppressions          the address's row goes; if the person asks to stay suppressed, only
                        the SHA-256 of the lower-cased address is kept (erased_suppressions),
                        which the enqueue and the sign-up form test addresses against

The campaign counts do not move (broadcast_counts holds no address, and a sent, failed or
cancelled job keeps its status), except that the jobs cancelled here are counted cancelled.
A job that is `sending` is in flight: the erasure is refused (409) until its outcome lands,
which is seconds (ErasureInFlight); nothing is changed by the refusal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from senddock import queue
from senddock.audience.subscribers import UnknownSubscriber
from senddock.db import sql
from senddock.errors import Conflict

Conn = psycopg.Connection[dict[str, Any]]

QUERIES = sql.load(__package__, "erasure.sql")


class InFlight(Conflict):
    """A message to the subscriber is being sent right now (409): erase once it has landed."""


class AlreadyErased(Conflict):
    """The subscriber was erased before: nothing of theirs is left to erase (409)."""


@dataclass(frozen=True)
class Erased:
    """What one erasure did, for the line every surface prints."""

    subscriber_id: int
    kept_row: bool  # jobs name them: the row stays, anonymized
    jobs: int  # jobs whose address was taken out
    cancelled: int  # of those, not sent yet and now cancelled
    findings: int  # bounce findings stripped
    messages: int  # raw bounce messages emptied
    consents: int  # sign-up consent rows deleted
    events: int  # preference history rows deleted
    suppression: str | None  # the suppression's reason that was removed, if any
    kept_suppressed: bool  # a digest of the address stays suppressed

    def summary(self, address: str) -> str:
        kept = (
            "; the address stays suppressed (only its SHA-256 is kept)"
            if self.kept_suppressed
            else "; it is not suppressed any more"
            if self.suppression
            else ""
        )
        row = f"{self.jobs} job(s) kept without it" if self.kept_row else "the row deleted"
        cancelled = f", {self.cancelled} not yet sent cancelled" if self.cancelled else ""
        return (
            f"{address} erased: {row}{cancelled}, {self.findings} bounce finding(s) and"
            f" {self.messages} raw message(s) cleared, {self.consents} consent and"
            f" {self.events} preference record(s) deleted{kept}"
        )


def stand_in(subscriber_id: int) -> str:
    """The address an erased subscriber's row and jobs hold instead (never delivered)."""
    return f"erased-{subscriber_id}@erased.invalid"


def erase(conn: Conn, address: str, *, keep_suppressed: bool = False) -> Erased:
    """Erase the subscriber of `address` now (see the module's table), in one transaction.

    UnknownSubscriber if there is none; InFlight (nothing changed) while a message to them is
    being sent; AlreadyErased for a stand-in address. `keep_suppressed`: the person asked
    never to be mailed again, so a digest of the address stays suppressed.
    """
    found = conn.execute(QUERIES["whose"], {"email": address.strip()}).fetchone()
    if found is None:
        raise UnknownSubscriber(f"no subscriber {address.strip()!r}")
    sid, email = int(found["id"]), str(found["email"])
    with conn.transaction():
        # The bounce rows first, before the fence: searching kept messages byte by byte is
        # the slow part (bench/erasure.py), and no enqueue chunk should wait for it.
        found_in = conn.execute(QUERIES["scrub_findings"], {"s": sid, "email": email}).fetchall()
        ids = sorted({int(r["message_id"]) for r in found_in})
        messages = conn.execute(QUERIES["scrub_messages"], {"ids": ids, "email": email}).rowcount
        try:
            # The jobs first (the fence against enqueue and claim), then the row: an outcome
            # write locks its job, then the subscriber (tag_all_bounced).
            done = queue.erase_jobs(conn, sid, stand_in(sid), _local_part(email))
        except queue.ErasureInFlight as exc:
            raise InFlight(
                f"a message to {address.strip()} is being sent right now;"
                " erase them again once it has landed (seconds)"
            ) from exc
        row = conn.execute(QUERIES["lock"], {"s": sid}).fetchone()
        if row is None:  # deleted meanwhile
            raise UnknownSubscriber(f"no subscriber {address.strip()!r}")
        if row["status"] == "erased":
            raise AlreadyErased(f"subscriber {sid} was erased already")
        if str(row["email"]).lower() != email.lower():  # changed since `whose`: start again
            raise Conflict(f"{address.strip()} changed address while being erased; erase again")
        removed = conn.execute(QUERIES["unsuppress"], {"email": email}).fetchone()
        reason = None if removed is None else str(removed["reason"])
        if keep_suppressed:
            conn.execute(
                QUERIES["keep_suppressed"],
                {"email": email, "reason": f"erased on request ({reason or 'asked'})"},
            )
        conn.execute(QUERIES["forget_memberships"], {"s": sid})
        consents = conn.execute(QUERIES["forget_consents"], {"s": sid}).rowcount
        events = conn.execute(QUERIES["forget_events"], {"s": sid}).rowcount
        conn.execute(QUERIES["unname_engagement"], {"s": sid})
        conn.execute(QUERIES["scrub_imports"], {"email": email})
        if done.jobs:
            conn.execute(QUERIES["anonymize"], {"s": sid})
        else:
            conn.execute(QUERIES["delete"], {"s": sid})
    if done.cancelled:
        queue.finish_sync(conn)  # a broadcast whose last unsent job was theirs ends now
    return Erased(
        subscriber_id=sid,
        kept_row=bool(done.jobs),
        jobs=done.jobs,
        cancelled=done.cancelled,
        findings=len(found_in),
        messages=messages,
        consents=consents,
        events=events,
        suppression=reason,
        kept_suppressed=keep_suppressed,
    )


def _local_part(address: str) -> str:
    """The part before the last @ (a reply that names the mailbox names it, in any domain
    form: Unicode or A-labels)."""
    return address.strip().rpartition("@")[0] or address.strip()
