"""Opens and clicks (issue 37): where tracked links go, the events `serve` writes in batches,
and the figures every surface shows. The message side (rewriting, signing) is in
messages/tracking.py, which knows no database."""

from senddock.tracking.events import Event, EventWriter
from senddock.tracking.links import Targets, store
from senddock.tracking.report import Engagement, LinkClicks, engagement

__all__ = [
    "Engagement",
    "Event",
    "EventWriter",
    "LinkClicks",
    "Targets",
    "engagement",
    "store",
]
