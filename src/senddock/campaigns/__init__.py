"""Campaigns: create, Broadcast() enqueue, counts, pause and resume."""

from senddock.campaigns.broadcast import NothingToSend, broadcast
from senddock.campaigns.campaigns import (
    CampaignError,
    UnknownCampaign,
    cancel,
    create_campaign,
    pause,
    resume,
    status,
)

__all__ = [
    "CampaignError",
    "NothingToSend",
    "UnknownCampaign",
    "broadcast",
    "cancel",
    "create_campaign",
    "pause",
    "resume",
    "status",
]
