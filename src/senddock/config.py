"""Settings from the environment (SENDDOCK_*). Secrets never live in files of ours."""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass
from typing import Annotated, Literal
from urllib.parse import SplitResult, parse_qs, unquote, urlsplit

from pydantic import BeforeValidator, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from senddock.redaction import hide_password

_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw]?)\s*", re.IGNORECASE)
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration(value: object) -> float:
    """Seconds from `90`, `90s`, `15m`, `12h`, `30d` or `2w` (a number alone is seconds)."""
    if isinstance(value, int | float):
        return float(value)
    found = _DURATION.fullmatch(str(value))
    if not found:
        raise ValueError(f"not a duration: {value!r} (e.g. 90s, 15m, 12h, 30d)")
    return float(found.group(1)) * _UNITS[found.group(2).lower()]


Duration = Annotated[float, BeforeValidator(duration), Field(gt=0)]

_SPOKEN = ((86400, "day", "days"), (3600, "h", "h"), (60, "min", "min"), (1, "s", "s"))


def spoken(seconds: float) -> str:
    """A duration as a person reads it: `1.5 s`, `2 min`, `1 h 30 min`, `14 days` (to the
    second from a minute on)."""
    if seconds < 60:
        return f"{seconds:g} s"
    parts = []
    left = round(seconds)
    for size, one, many in _SPOKEN:
        n, left = divmod(left, size)
        if n:
            parts.append(f"{n} {one if n == 1 else many}")
    return " ".join(parts)


def proxy_networks(value: str) -> list[str]:
    """The entries of SENDDOCK_TRUSTED_PROXIES (IPs or CIDRs, comma or space separated),
    each checked; ValueError names the first that is neither."""
    entries = [e for e in _SEPARATORS.split(value) if e]
    for entry in entries:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError as exc:
            raise ValueError(f"SENDDOCK_TRUSTED_PROXIES: {entry!r} is not an IP or CIDR") from exc
    return entries


class Settings(BaseSettings):
    """Everything tunable, read once from SENDDOCK_* variables (and XDG_DATA_HOME), built once
    by the command and passed down: nothing else reads the environment."""

    model_config = SettingsConfigDict(env_prefix="SENDDOCK_", extra="ignore")

    database_url: str | None = None
    smtp_url: str = "smtp://127.0.0.1:25?tls=none"
    data_dir: str | None = None
    # Where data lives without SENDDOCK_DATA_DIR: $XDG_DATA_HOME/senddock, else
    # ~/.local/share/senddock (the XDG base directory convention, so no SENDDOCK_ prefix).
    xdg_data_home: str | None = Field(default=None, validation_alias="XDG_DATA_HOME")
    # Links in messages (messages/links.py). The base URL of every link; `senddock serve`
    # answers there.
    public_url: str = "http://127.0.0.1:8025"
    # Overrides the key made by `senddock migrate` (app_secrets.link_key) when set.
    secret_key: str | None = None
    # Where the mailto: unsubscribe goes; the campaign's From address when unset.
    unsubscribe_mailto: str | None = None
    # Issue 37: what a new campaign tracks when its creator says nothing: '' (nothing, the
    # default), 'opens', 'clicks' or 'opens,clicks' (messages/tracking.py Track.parse).
    track: str = ""
    # Issue 37: 1 makes every campaign created or edited from now anonymous when it tracks
    # (counts per campaign only, no event names a person), whatever its creator asked.
    track_anonymous: bool = False
    # Issue 37: an open or click less than this many seconds after its message's delivery is
    # judged a machine's (a proxy or scanner fetching on arrival; tracking/events.py).
    track_prefetch: float = Field(default=10.0, ge=0)
    # `serve`: what POST /unsubscribe/TOKEN (RFC 8058 one-click) does: `suppress` leaves the
    # campaign's lists and suppresses the address; `lists` only leaves the campaign's lists.
    one_click: Literal["suppress", "lists"] = "suppress"
    # `serve`: signs the session cookie; the key stored in the database when unset.
    session_secret: str | None = None
    # `serve`: 1, true or yes marks cookies Secure even when the public URL is not https.
    cookie_secure: str = ""
    # Seconds to wait before retry 1..n; its length is the retry budget.
    retry_schedule: str = "30,120,480,1800,3600"
    smtp_timeout: float = 60.0
    # A job whose final dot went and whose outcome is unknown (its worker died, or the relay
    # hung up before replying): `hold` keeps it `unconfirmed` for a person to resend or confirm
    # (nobody sent twice); `resend` sends it again at once (a rare duplicate, no decision).
    unconfirmed: Literal["hold", "resend"] = "hold"
    # Liveness: heartbeat every `heartbeat_interval` s; a worker whose heartbeat is older than
    # `lease_seconds` (database clock) and whose lock is free is dead.
    heartbeat_interval: float = 2.0
    lease_seconds: float = 15.0
    # Where each worker process keeps its dot log (delivery/dotlog.py): which final dot each
    # sender was about to write, read by a rescuer on the same host so that a job whose dot
    # never went is not left `unconfirmed`. Empty: /dev/shm/senddock-UID (else the temporary
    # folder); `off`: none (every job marked for its dot is unconfirmed after a crash).
    dot_log_dir: str = ""
    # Replies about us in a row (per worker process) before a broadcast pauses.
    sender_fault_limit: int = Field(default=3, ge=1)
    # A job sent back this many times by replies about us fails as rejected.
    job_sender_fault_limit: int = Field(default=5, ge=1)
    claim_batch: int = Field(default=50, ge=1)
    # Jobs of broadcasts that ended more than this many days ago are deleted, their counts
    # kept (delivery/cleaner.py); 0 keeps them forever.
    retention_days: int = Field(default=90, ge=0)
    # Jobs per enqueue chunk: one transaction each (campaigns/broadcast.py).
    enqueue_chunk: int = Field(default=50_000, ge=1)
    # The largest CSV upload (API and dashboard), in MB: a bigger body is answered 413.
    max_import_mb: int = Field(default=50, ge=1)
    # Dashboard live streams (/events/): each ends after this many seconds (the browser
    # reconnects), and one session from one address holds at most this many at once.
    stream_seconds: float = Field(default=300.0, gt=0)
    streams_per_session: int = Field(default=5, ge=1)
    # `serve`: the peers whose X-Forwarded-For names the client (reverse proxies); none by
    # default, so a client cannot pick the address its sign-in attempts are counted against.
    trusted_proxies: str = ""
    # A dashboard session ends after this long unused, and this long after sign-in whatever.
    session_idle_timeout: Duration = 12 * 3600.0
    session_lifetime: Duration = 14 * 86400.0
    # Provider webhooks (`serve`, web/webhooks.py): each route is off (404) until its secret
    # is set. SES: the SNS topics whose messages are accepted (ARNs, comma or space
    # separated); the hosts SNS certificates and SubscribeURLs may come from (a regex over the
    # host, Amazon's SNS hosts when unset); a CA bundle for those https fetches (the system's
    # when unset).
    sns_topic_arns: str = ""
    sns_cert_hosts: str | None = None
    sns_ca_file: str | None = None
    # Mailgun's HTTP webhook signing key; SendGrid's signed event webhook verification key
    # (base64 DER as SendGrid shows it, or PEM); the basic-auth pair in Postmark's webhook URL.
    mailgun_signing_key: SecretStr | None = None
    sendgrid_public_key: SecretStr | None = None
    postmark_webhook_user: str | None = None
    postmark_webhook_password: SecretStr | None = None
    # Reconcile (issue 41: `campaign reconcile`, the dashboard's button): the sources asked
    # whether an unconfirmed job's relay took it, each off until set. The relay's log files
    # (Postfix or Exim; comma separated, its rotated files too, `.gz` read), the zone of their
    # timestamps that carry none (an IANA name; this machine's when unset), the relay they log
    # (a SENDDOCK_SMTP_URL name: jobs sent elsewhere are not judged by it; unset: every relay),
    # and the slack of clocks and of a relay finishing a message whose client vanished.
    reconcile_logs: str = ""
    reconcile_log_tz: str | None = None
    reconcile_log_relay: str | None = None
    reconcile_slack: Duration = 30.0
    # Provider searches: Mailgun's events API (key, sending domain), Postmark's message search
    # (server token), SendGrid's email activity (an API key with Email Activity access). Base
    # URLs: https, or http to a loopback address (a local gateway).
    mailgun_api_key: SecretStr | None = None
    mailgun_domain: str | None = None
    mailgun_api_url: str = "https://api.mailgun.net"
    postmark_server_token: SecretStr | None = None
    postmark_api_url: str = "https://api.postmarkapp.com"
    sendgrid_api_key: SecretStr | None = None
    sendgrid_api_url: str = "https://api.sendgrid.com"
    # Accept subscriber and test-send addresses at reserved domains (.test, .local, .internal,
    # …: audience/addresses.py), which are refused by default: internal relays and tests.
    allow_reserved_domains: bool = False
    # Bounces after the 250 (issue 21): the return path's domain (`bounces.example.org`) or
    # address (`bounce@example.org`); unset, bounces are read by our Message-ID alone.
    bounce_domain: str | None = None
    # This many soft bounces (distinct messages) within this many days suppress an address.
    soft_bounce_limit: int = Field(default=3, ge=1)
    soft_bounce_days: int = Field(default=30, ge=1)
    # A returned message's or event's bytes are kept this many days (0: forever); its findings
    # and their effects stay. `bounces serve` takes at most this many messages a minute from
    # one client address (451 past them: a relay tries again later).
    bounce_raw_days: int = Field(default=30, ge=0)
    bounce_per_minute: int = Field(default=300, ge=1)

    @functools.cached_property
    def proxies(self) -> list[str]:
        """The trusted proxies, parsed (ValueError on a bad entry)."""
        return proxy_networks(self.trusted_proxies)

    @functools.cached_property
    def backoff(self) -> tuple[float, ...]:
        """The retry schedule in seconds (parsed once: every outcome reads it)."""
        return tuple(float(s) for s in self.retry_schedule.split(",") if s.strip())


# Query parameters an SMTP URL may carry; anything else is a typo we refuse (a misspelt
# `per_second` must not silently send unmetered).
_URL_PARAMS = frozenset({"tls", "verify", "weight", "per_second", "per_minute", "per_hour", "name"})
_SEPARATORS = re.compile(r"[\s,]+")


@dataclass(frozen=True)
class SmtpTarget:
    """One SMTP relay, parsed from an entry of SENDDOCK_SMTP_URL.

    `name` keys the relay's shared rate-limit state (default host:port); `weight` is its share
    of the messages among healthy relays; `per_*` cap its messages per second/minute/hour
    across every worker process (None: no cap).
    """

    host: str
    port: int
    username: str | None
    password: str | None
    tls: str  # none | starttls | tls
    verify: bool = True  # verify the server's certificate (verify=false for self-signed dev relays)
    name: str = ""
    weight: int = 1
    per_second: int | None = None
    per_minute: int | None = None
    per_hour: int | None = None

    def describe(self) -> str:
        """The relay in one line for people: no password, ever."""
        scheme = "smtps" if self.tls == "tls" else "smtp"
        user = f"{self.username}@" if self.username else ""
        text = f"{scheme}://{user}{self.host}:{self.port} tls={self.tls}"
        if not self.verify:
            text += " verify=false"
        if self.name != f"{self.host}:{self.port}":
            text += f" name={self.name}"
        if self.weight != 1:
            text += f" weight={self.weight}"
        limits = [
            f"{n}/{unit}"
            for n, unit in ((self.per_second, "s"), (self.per_minute, "min"), (self.per_hour, "h"))
            if n is not None
        ]
        text += f", at most {' '.join(limits)}" if limits else ", no rate limit"
        if self.password:
            text += " (password hidden)"
        return text

    @property
    def limited(self) -> bool:
        """Whether any rate limit applies to this relay."""
        return any(n is not None for n in (self.per_second, self.per_minute, self.per_hour))

    @classmethod
    def parse(cls, url: str) -> SmtpTarget:
        """The first relay of the setting (every entry is checked). Senders use `parse_all`:
        the workers pick by weight, one-off sends (delivery/oneoff.py) take the next relay
        when one cannot be reached."""
        return cls.parse_all(url)[0]

    @classmethod
    def parse_all(cls, value: str) -> list[SmtpTarget]:
        """Every relay of SENDDOCK_SMTP_URL: URLs separated by whitespace or commas."""
        urls = [u for u in _SEPARATORS.split(value) if u]
        if not urls:
            raise ValueError("SMTP URL is empty")
        targets = [cls._parse_one(u) for u in urls]
        names = [t.name for t in targets]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"two SMTP servers share the name {twice[0]!r}; give each a name=")
        return targets

    @classmethod
    def _parse_one(cls, url: str) -> SmtpTarget:
        parts = urlsplit(url)
        if parts.scheme not in ("smtp", "smtps"):
            raise ValueError(
                f"SMTP URL must start with smtp:// or smtps://, got {hide_password(url)!r}"
            )
        query = parse_qs(parts.query, keep_blank_values=True)
        unknown = sorted(set(query) - _URL_PARAMS)
        if unknown:
            raise ValueError(f"unknown SMTP URL parameter {unknown[0]!r} in {_redacted(parts)}")
        default_tls = "tls" if parts.scheme == "smtps" else "none"
        tls = query.get("tls", [default_tls])[0]
        if tls not in ("none", "starttls", "tls"):
            raise ValueError(f"tls must be none, starttls or tls, got {tls!r}")
        default_port = {"none": 25, "starttls": 587, "tls": 465}[tls]
        try:
            port = parts.port or default_port
        except ValueError as exc:  # a port that is not a number, or out of range
            raise ValueError(f"bad port in SMTP URL {_redacted(parts)}") from exc
        host = parts.hostname or "127.0.0.1"
        name = query.get("name", [f"{host}:{port}"])[0].strip()
        if not name:
            raise ValueError("name= in an SMTP URL must not be empty")
        return cls(
            host=host,
            port=port,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            tls=tls,
            verify=query.get("verify", ["true"])[0].lower() not in ("0", "false", "no"),
            name=name,
            weight=_count(query, "weight") or 1,
            per_second=_count(query, "per_second"),
            per_minute=_count(query, "per_minute"),
            per_hour=_count(query, "per_hour"),
        )


def _count(query: dict[str, list[str]], key: str) -> int | None:
    """A positive whole number from the URL's query, or None when absent."""
    if key not in query:
        return None
    raw = query[key][0].strip()
    if not re.fullmatch(r"[0-9]{1,9}", raw) or int(raw) < 1:
        raise ValueError(f"{key} must be a whole number >= 1, got {raw!r}")
    return int(raw)


def _redacted(parts: SplitResult) -> str:
    """The URL without its password, for error messages."""
    netloc = parts.hostname or ""
    if parts.username:
        netloc = f"{parts.username}@{netloc}"
    return f"{parts.scheme}://{netloc}"


def describe(settings: Settings) -> list[tuple[str, str]]:
    """What the settings say, as (label, text) lines safe to print: passwords are hidden.

    The SMTP URL must parse (settings() in the CLI checks it first).
    """
    lines = [("relay", t.describe()) for t in SmtpTarget.parse_all(settings.smtp_url)]
    if settings.database_url:
        lines.append(("database", hide_password(settings.database_url)))
    else:
        lines.append(("database", "embedded Postgres (no SENDDOCK_DATABASE_URL)"))
    return lines


def defaulted(settings: BaseSettings, field: str) -> bool:
    """Whether `field` was left at its default (its SENDDOCK_* variable is not set)."""
    return field not in settings.model_fields_set


def load() -> Settings:
    """Read settings from the environment now."""
    return Settings()
