"""Campaigns: create, Broadcast() enqueue, counts, pause and resume, who got what."""

from senddock.campaigns.broadcast import NothingToSend, broadcast
from senddock.campaigns.campaigns import (
    CampaignError,
    CampaignStatus,
    CancelReport,
    UnknownCampaign,
    cancel,
    cancel_and_settle,
    create_campaign,
    pause,
    reply_line,
    reply_summary,
    resume,
    status,
    track_for,
)
from senddock.campaigns.recipients import confirm, recipients, resend_unconfirmed, retry_failed
from senddock.campaigns.scheduler import SendTimeInPast, refuse_past, run_due, schedule

__all__ = [
    "CampaignError",
    "CampaignStatus",
    "CancelReport",
    "NothingToSend",
    "SendTimeInPast",
    "UnknownCampaign",
    "broadcast",
    "cancel",
    "cancel_and_settle",
    "confirm",
    "create_campaign",
    "pause",
    "recipients",
    "refuse_past",
    "reply_line",
    "reply_summary",
    "resend_unconfirmed",
    "resume",
    "retry_failed",
    "run_due",
    "schedule",
    "status",
    "track_for",
]
