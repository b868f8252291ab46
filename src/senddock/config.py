"""Settings from the environment (SENDDOCK_*). Secrets never live in files of ours."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Everything tunable, read once from SENDDOCK_* variables."""

    model_config = SettingsConfigDict(env_prefix="SENDDOCK_", extra="ignore")

    database_url: str | None = None
    smtp_url: str = "smtp://127.0.0.1:25?tls=none"
    data_dir: str | None = None
    # Seconds to wait before retry 1..n; its length is the retry budget.
    retry_schedule: str = "30,120,480,1800,3600"
    smtp_timeout: float = 60.0
    # Liveness: heartbeat every `heartbeat_interval` s; a worker whose heartbeat is older than
    # `lease_seconds` (database clock) and whose lock is free is dead.
    heartbeat_interval: float = 2.0
    lease_seconds: float = 15.0
    # Replies about us in a row (per worker process) before a broadcast pauses.
    sender_fault_limit: int = Field(default=3, ge=1)
    # A job sent back this many times by replies about us fails as rejected.
    job_sender_fault_limit: int = Field(default=5, ge=1)
    claim_batch: int = Field(default=10, ge=1)
    # Jobs of broadcasts that ended more than this many days ago are deleted, their counts
    # kept (delivery/cleaner.py); 0 keeps them forever.
    retention_days: int = Field(default=90, ge=0)
    # Jobs per enqueue chunk: one transaction each (campaigns/broadcast.py).
    enqueue_chunk: int = Field(default=50_000, ge=1)

    @property
    def backoff(self) -> list[float]:
        """The retry schedule in seconds."""
        return [float(s) for s in self.retry_schedule.split(",") if s.strip()]


@dataclass(frozen=True)
class SmtpTarget:
    """Where and how to reach the SMTP relay, parsed from SENDDOCK_SMTP_URL."""

    host: str
    port: int
    username: str | None
    password: str | None
    tls: str  # none | starttls | tls
    verify: bool = True  # verify the server's certificate (verify=false for self-signed dev relays)

    @classmethod
    def parse(cls, url: str) -> SmtpTarget:
        parts = urlsplit(url)
        if parts.scheme not in ("smtp", "smtps"):
            raise ValueError(f"SMTP URL must start with smtp:// or smtps://, got {url!r}")
        query = parse_qs(parts.query)
        default_tls = "tls" if parts.scheme == "smtps" else "none"
        tls = query.get("tls", [default_tls])[0]
        if tls not in ("none", "starttls", "tls"):
            raise ValueError(f"tls must be none, starttls or tls, got {tls!r}")
        default_port = {"none": 25, "starttls": 587, "tls": 465}[tls]
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or default_port,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            tls=tls,
            verify=query.get("verify", ["true"])[0].lower() not in ("0", "false", "no"),
        )


def load() -> Settings:
    """Read settings from the environment now."""
    return Settings()
