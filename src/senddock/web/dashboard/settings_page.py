"""The settings page: what the workers use, read-only, so an operator can check it.

Built from the Settings `serve` was started with (the same SENDDOCK_* environment the workers
read). No secret is ever rendered: relay passwords, webhook keys and the database password
are not in the rows this module makes, only whether they are set.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from senddock.config import Settings, SmtpTarget, spoken
from senddock.delivery import dotlog
from senddock.redaction import hide_password
from senddock.web.dashboard.gate import LoggedIn
from senddock.web.dashboard.views import render

router = APIRouter(include_in_schema=False, route_class=LoggedIn)


@dataclass(frozen=True)
class Relay:
    """One relay as the page shows it: everything but the password."""

    name: str
    host: str
    port: int
    tls: str
    verify: bool
    user: str
    has_password: bool
    weight: int
    limits: str

    @classmethod
    def of(cls, target: SmtpTarget) -> Relay:
        caps = [
            f"{n:,}/{unit}"
            for n, unit in (
                (target.per_second, "s"),
                (target.per_minute, "min"),
                (target.per_hour, "h"),
            )
            if n is not None
        ]
        return cls(
            name=target.name,
            host=target.host,
            port=target.port,
            tls=target.tls,
            verify=target.verify,
            user=target.username or "",
            has_password=bool(target.password),
            weight=target.weight,
            limits=", ".join(caps) or "none",
        )


def _days(n: int) -> str:
    return "kept forever" if n == 0 else f"{n} day{'s' if n != 1 else ''}"


def _set(value: object) -> str:
    return "set" if value else "not set"


def sections(settings: Settings, database_url: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """The page's tables: (heading, [(setting, value shown)]), secrets shown only as set."""
    retries = ", ".join(spoken(s) for s in settings.backoff) or "none"
    dots = dotlog.directory(settings.dot_log_dir)
    return [
        (
            "Sending",
            [
                ("Public URL (links in messages)", settings.public_url),
                ("Retry schedule", retries),
                ("Claim batch", str(settings.claim_batch)),
                ("SMTP timeout", spoken(settings.smtp_timeout)),
                ("Outcome unknown after the final dot", settings.unconfirmed),
                ("Dot log (which final dots went, for a crash)", str(dots) if dots else "off"),
                ("Replies about us before a broadcast pauses", str(settings.sender_fault_limit)),
                (
                    "Heartbeat / lease",
                    f"{spoken(settings.heartbeat_interval)} / {spoken(settings.lease_seconds)}",
                ),
            ],
        ),
        (
            "Retention",
            [
                ("Jobs of finished broadcasts", _days(settings.retention_days)),
                ("Enqueue chunk", f"{settings.enqueue_chunk:,} jobs"),
                ("Largest CSV upload", f"{settings.max_import_mb} MB"),
            ],
        ),
        (
            "Bounces",
            [
                ("Bounce domain", settings.bounce_domain or "not set (matched by Message-ID)"),
                (
                    "Soft bounces that suppress",
                    f"{settings.soft_bounce_limit} within {_days(settings.soft_bounce_days)}",
                ),
                ("SES topics", settings.sns_topic_arns or "not set"),
                ("Mailgun signing key", _set(settings.mailgun_signing_key)),
                ("SendGrid verification key", _set(settings.sendgrid_public_key)),
                ("Postmark webhook password", _set(settings.postmark_webhook_password)),
            ],
        ),
        (
            "Server",
            [
                ("Database", hide_password(database_url)),
                ("Trusted proxies", settings.trusted_proxies or "none"),
                ("Session idle timeout", spoken(settings.session_idle_timeout)),
                ("Session lifetime", spoken(settings.session_lifetime)),
            ],
        ),
    ]


@router.get("/settings")
def settings_page(request: Request) -> Response:
    settings: Settings = request.app.state.settings
    relays = [Relay.of(t) for t in SmtpTarget.parse_all(settings.smtp_url)]
    return render(
        request,
        "settings.html",
        title="Settings",
        relays=relays,
        sections=sections(settings, request.app.state.database_url),
    )
