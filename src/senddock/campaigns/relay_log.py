"""A relay's log as a witness: which of our Message-IDs it accepted, and what span it covers.

Issue 41. After a crash a job is `unconfirmed`: its final dot may have gone. The relay's log
can tell, where the operator can read it (SENDDOCK_RECONCILE_LOGS):

| relay   | the line that proves a message was accepted (its 250 "queued as" went)            |
|---------|-----------------------------------------------------------------------------------|
| Postfix | `cleanup[…]: QUEUEID: message-id=<ID>`, then `qmgr[…]: QUEUEID: from=<…>`:        |
|         | cleanup logs the Message-ID while the body is still arriving, so alone it proves  |
|         | nothing (a client gone before its dot leaves that line and no queue file); qmgr   |
|         | logs `from=` only for a message committed to the queue, after which smtpd says    |
|         | 250. A queue id is reused (it names an inode): the latest cleanup line counts.    |
| Exim    | `<=` (arrival) with `id=ID`: written once the message is on the spool.            |

A job the log does not show accepted is `not accepted` only when the log provably covers the
job's whole window: its first line is before the job's claim and its last line after the
job's final dot, each by `slack` (the two hosts' clocks and a relay still finishing a message
whose client vanished). Otherwise `cannot tell`, with why: a log rotated since the claim
(give the rotated file too: SENDDOCK_RECONCILE_LOGS takes several, `.gz` included), a log
that stops before the dot, a job that went to another relay (SENDDOCK_RECONCILE_LOG_RELAY).
Files given together are taken as one log: their span is from the earliest line to the
latest (a missing file in the middle of a rotation cannot be seen; give them all).

Timestamps: syslog's `Dec  7 13:54:11` (Postfix's own maillog_file too: no year, the year is
the one that puts it at most a day ahead of now), RFC 3339 (`2026-12-07T13:54:11.123+00:00`,
rsyslog's high-precision format) and Exim's `2026-12-07 13:54:11 [+0000]`; without a zone,
in SENDDOCK_RECONCILE_LOG_TZ (this machine's zone by default).

Pure but for reading the files; no database.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from pathlib import Path

# Syslog's month names (the C locale's, whatever ours is), 1-based.
_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
MONTHS = {m: i + 1 for i, m in enumerate(_NAMES)}

_SYSLOG = re.compile(r"(?P<mon>[A-Z][a-z]{2}) {1,2}(?P<day>\d\d?) (?P<t>\d\d:\d\d:\d\d)(?:\.\d+)? ")
_RFC3339 = re.compile(
    r"(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?)(?P<zone>Z|[+-]\d\d:?\d\d)?"
    r"(?: (?P<zone2>[+-]\d{4}))? "
)
_CLEANUP = re.compile(r"/cleanup\[\d+\]: (?P<q>[0-9A-Za-z]+): message-id=(?P<m>\S*)")
_QMGR = re.compile(r"/qmgr\[\d+\]: (?P<q>[0-9A-Za-z]+): from=<")
_EXIM = re.compile(r"(?:^|\s)(?:\[\d+\] )?(?P<q>[-0-9A-Za-z]{16,23}) <= .*? id=(?P<m>\S+)")


def normal(message_id: str) -> str:
    """A Message-ID as compared here: no angle brackets, lower case."""
    return message_id.strip().strip("<>").lower()


@dataclass(frozen=True)
class Accepted:
    """Where and when the relay took one Message-ID."""

    queue_id: str
    at: datetime


@dataclass
class RelayLog:
    """What a relay's log says: its span and the Message-IDs it accepted."""

    files: tuple[str, ...] = ()
    first: datetime | None = None
    last: datetime | None = None
    accepted: dict[str, Accepted] = field(default_factory=dict)
    lines: int = 0

    def _seen(self, at: datetime) -> None:
        self.first = at if self.first is None or at < self.first else self.first
        self.last = at if self.last is None or at > self.last else self.last


def _stamp(line: str, now: datetime, zone: tzinfo) -> tuple[datetime, str] | None:
    """The line's time (aware) and the rest of the line, or None for a line without one."""
    found = _RFC3339.match(line)
    if found:
        offset = (found["zone"] or found["zone2"] or "").replace("Z", "+00:00")
        at = datetime.fromisoformat(found["ts"].replace(" ", "T") + offset)
        if at.tzinfo is None:
            at = at.replace(tzinfo=zone)
        return at, line[found.end() :]
    found = _SYSLOG.match(line)
    if found is None or found["mon"] not in MONTHS:
        return None
    hour, minute, second = (int(x) for x in found["t"].split(":"))
    local = now.astimezone(zone)
    try:
        at = datetime(local.year, MONTHS[found["mon"]], int(found["day"]), hour, minute, second)
    except ValueError:
        return None  # Feb 29 of another year, or garbage
    at = at.replace(tzinfo=zone)
    if at > now + timedelta(days=1):  # December's lines read in January
        at = at.replace(year=at.year - 1)
    return at, line[found.end() :]


def parse(
    lines: Iterable[str], now: datetime, zone: tzinfo, log: RelayLog | None = None
) -> RelayLog:
    """Read Postfix or Exim log lines into `log` (a new one when None)."""
    log = log if log is not None else RelayLog()
    queued: dict[str, tuple[str, datetime]] = {}  # Postfix queue id -> its latest Message-ID
    for line in lines:
        stamped = _stamp(line, now, zone)
        if stamped is None:
            continue
        at, rest = stamped
        log.lines += 1
        log._seen(at)
        if found := _CLEANUP.search(rest):
            queued[found["q"]] = (normal(found["m"]), at)
        elif found := _QMGR.search(rest):
            seen = queued.pop(found["q"], None)
            if seen is not None and seen[0]:
                log.accepted.setdefault(seen[0], Accepted(found["q"], at))
        elif found := _EXIM.search(rest):
            log.accepted.setdefault(normal(found["m"]), Accepted(found["q"], at))
    return log


def read(paths: Sequence[str | Path], now: datetime, zone: tzinfo) -> RelayLog:
    """Read the log files (plain or .gz) as one log. OSError for a file that cannot be read."""
    log = RelayLog(files=tuple(str(p) for p in paths))
    for path in sorted((Path(p) for p in paths), key=_age, reverse=True):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as lines:
            parse(lines, now, zone, log)
    return log


def _age(path: Path) -> float:
    """Oldest first: rotated files (`maillog.2.gz`, `maillog.1`) before the current one."""
    return -path.stat().st_mtime


@dataclass(frozen=True)
class Word:
    """What one source said of one job: accepted | not accepted | not seen | cannot tell."""

    source: str
    said: str
    detail: str


def judge(
    log: RelayLog,
    source: str,
    message_id: str,
    claimed_at: datetime | None,
    dot_at: datetime | None,
    slack: timedelta,
) -> Word:
    """What the log says of one job (see the module's docstring)."""
    seen = log.accepted.get(normal(message_id))
    if seen is not None:
        return Word(source, "accepted", f"queued as {seen.queue_id} at {seen.at.isoformat()}")
    if log.first is None or log.last is None:
        return Word(source, "cannot tell", "the log has no dated line")
    start = claimed_at or dot_at
    if start is None or dot_at is None:
        return Word(source, "cannot tell", "the job has no claim or dot time")
    if log.first > start - slack:
        return Word(
            source,
            "cannot tell",
            f"the log begins at {log.first.isoformat()}, after the job's claim at"
            f" {start.isoformat()} (less {slack.total_seconds():g} s): give the rotated file too",
        )
    if log.last < dot_at + slack:
        return Word(
            source,
            "cannot tell",
            f"the log ends at {log.last.isoformat()}, before the job's dot at"
            f" {dot_at.isoformat()} plus {slack.total_seconds():g} s",
        )
    return Word(
        source,
        "not accepted",
        f"the log covers {log.first.isoformat()} to {log.last.isoformat()} and never accepted it",
    )
