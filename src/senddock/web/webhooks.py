"""Provider webhooks: bounces and complaints that SES, Mailgun, SendGrid and Postmark report.

POST /webhooks/ses       SNS messages; on when SENDDOCK_SNS_TOPIC_ARNS names the topics
POST /webhooks/mailgun   on when SENDDOCK_MAILGUN_SIGNING_KEY is set
POST /webhooks/sendgrid  on when SENDDOCK_SENDGRID_PUBLIC_KEY is set
POST /webhooks/postmark  on when SENDDOCK_POSTMARK_WEBHOOK_USER and _PASSWORD are set

Machine to machine: no session, no CSRF; each request proves itself (bounces.providers) and
a dashboard session gives it nothing. In order:

- a provider not configured answers 404 (the route is off), before a byte of the body;
- Postmark's basic auth is checked from the headers, in constant time, before the body;
- bodies are capped at guard.WEBHOOK_BODY (1 MB; 413 over it), and at most IN_FLIGHT
  requests are handled at once per process (503 beyond: providers retry);
- a client with 20 failed signatures in 5 minutes is answered 429 before any check, in every
  `serve` process (counted in Postgres: web/webhook_limits.py);
- a signature that does not hold is 403 (Postmark's credentials 401) and writes nothing; a
  body that is not the provider's format is 400; an SNS topic not in the setting is 403;
- SNS certificates and SubscribeURLs are fetched only over https from hosts the pattern
  allows (SENDDOCK_SNS_CERT_HOSTS, Amazon's by default), with a timeout, no redirects and a
  size cap; a certificate is kept in memory once fetched;
- a valid event is stored with its findings (bounces.store.receive_event) and answered 200
  only after that commit; Postgres unavailable is 503, so the provider sends it again. An
  event without a bounce or complaint (delivered, opened) is answered 200 and not stored;
- a delivery event (SES Send or Delivery, Mailgun accepted or delivered, SendGrid processed
  or delivered) that names a job of ours left unconfirmed by a crash confirms it sent, at
  once (issue 41: bounces.store.confirm_deliveries, recorded as `ses-event`, …). Postmark's
  Delivery webhook carries only Postmark's own MessageID, so it names no job of ours.

Replay: Mailgun and SendGrid signatures older than 15 minutes are refused; within that
window the digest makes an exact replay change nothing. Mailgun signs only its timestamp
and token, not the event, so its event is keyed by the token: the same token with another
body changes nothing either. SNS signs some fields of its JSON only: its event is keyed by its
topic and signed MessageId, so a replay with other unsigned bytes is the same event. A signed
event whose text Postgres cannot keep (a lone surrogate, a NUL) is stored with U+FFFD and
answered 200, never 500 (a provider would retry it forever).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hmac
import http.client
import json
import logging
import re
import ssl
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import psycopg
import psycopg_pool
from fastapi import APIRouter
from psycopg.rows import DictRow
from psycopg_pool import ConnectionPool
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from senddock.bounces import providers
from senddock.bounces.finding import Finding
from senddock.bounces.parse import parse
from senddock.bounces.store import confirm_deliveries, receive_event
from senddock.config import Settings
from senddock.errors import Invalid
from senddock.queue.bounces import SoftLimit
from senddock.web import webhook_limits

log = logging.getLogger("senddock.web")

Pool = ConnectionPool[psycopg.Connection[DictRow]]

IN_FLIGHT = 8  # webhook requests one process handles at once
FETCH_TIMEOUT = 5.0  # seconds for a whole certificate or SubscribeURL fetch
FETCH_BYTES = 64 * 1024  # a certificate is ~2 KB, a confirmation answer less than 1 KB
CERTS_KEPT = 16


class FetchFailed(OSError):
    """A certificate or SubscribeURL could not be fetched: the provider should retry."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_: Any) -> None:
        return None  # a 3xx is answered as it is: FetchFailed


def fetch(url: str, hosts: str, ca_file: str | None) -> bytes:
    """GET an https URL on an allowed host: bounded in time and size, no redirects."""
    if not providers.allowed_url(url, hosts):
        raise FetchFailed(f"not an allowed https URL: {url[:200]!r}")
    context = ssl.create_default_context(cafile=ca_file)
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), _NoRedirect)
    deadline = time.monotonic() + FETCH_TIMEOUT
    data = bytearray()
    try:
        with opener.open(url, timeout=FETCH_TIMEOUT) as answer:
            if answer.status != 200:
                raise FetchFailed(f"{url[:200]} answered {answer.status}")
            while chunk := answer.read(8192):
                data += chunk
                if len(data) > FETCH_BYTES or time.monotonic() > deadline:
                    raise FetchFailed(f"{url[:200]}: over {FETCH_BYTES} bytes or too slow")
    except (OSError, http.client.HTTPException) as exc:
        if isinstance(exc, FetchFailed):
            raise
        raise FetchFailed(f"{url[:200]}: {type(exc).__name__}") from None
    return bytes(data)


def _names(value: str) -> frozenset[str]:
    return frozenset(v for v in re.split(r"[\s,]+", value) if v)


def _answer(status: int, message: str, **extra: str) -> JSONResponse:
    return JSONResponse({"error": {"field": None, "message": message}}, status, headers=extra)


def _off() -> JSONResponse:
    return _answer(404, "this provider's webhook is not configured")


BUSY = {"Retry-After": "5"}
LATER = {"Retry-After": str(int(webhook_limits.WINDOW.total_seconds()))}


class Webhooks:
    """The four routes, sharing the app's pool and settings."""

    def __init__(self, pool: Pool, settings: Settings) -> None:
        self.pool = pool
        self.settings = settings
        self.soft = SoftLimit.of(settings)
        self.hosts = settings.sns_cert_hosts or providers.SNS_CERT_HOSTS
        try:
            re.compile(self.hosts)
        except re.error as exc:
            raise Invalid(f"SENDDOCK_SNS_CERT_HOSTS is not a regex: {exc}") from None
        self.topics = _names(settings.sns_topic_arns)
        self.sendgrid_key = None
        if settings.sendgrid_public_key:
            try:
                key = settings.sendgrid_public_key.get_secret_value()
                self.sendgrid_key = providers.load_sendgrid_key(key)
            except (ValueError, binascii.Error):
                message = "SENDDOCK_SENDGRID_PUBLIC_KEY is not SendGrid's verification key"
                raise Invalid(message) from None  # (the key is not repeated: no secrets in logs)
        self.slots = asyncio.Semaphore(IN_FLIGHT)
        self.cert = functools.lru_cache(maxsize=CERTS_KEPT)(self._fetch)

    def _fetch(self, url: str) -> bytes:
        return fetch(url, self.hosts, self.settings.sns_ca_file)

    def _confirm(self, source: str, delivered: tuple[str, ...]) -> Response | None:
        """Issue 41: confirm the unconfirmed jobs a delivery event names; 503 (the provider
        sends it again) when Postgres cannot take it, else None."""
        if not delivered:
            return None
        try:
            with self.pool.connection() as conn:
                n = confirm_deliveries(conn, source, delivered)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            log.warning("webhook %s: delivery not recorded, asking for a retry: %s", source, exc)
            return _answer(503, "the database is unavailable: send it again", **BUSY)
        if n:
            log.info("webhook %s: %d unconfirmed jobs confirmed sent by delivery events", source, n)
        return None

    def _store(
        self,
        source: str,
        body: bytes,
        findings: tuple[Finding, ...],
        message_id: str | None = None,
        identity: bytes | None = None,
    ) -> Response:
        """Commit the event, then 200; 503 when Postgres cannot take it."""
        if not findings:
            return JSONResponse({"new": False, "findings": 0})
        try:
            with self.pool.connection() as conn:
                got = receive_event(conn, source, body, findings, message_id, identity, self.soft)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            log.warning("webhook %s: not stored, asking for a retry: %s", source, exc)
            return _answer(503, "the database is unavailable: send it again", **BUSY)
        log.info(
            "webhook %s: event %d %s, %d findings, %d matched",
            source,
            got.id,
            "stored" if got.new else "seen before",
            got.findings,
            got.matched,
        )
        return JSONResponse({"new": got.new, "findings": got.findings})

    async def _refused(self, host: str | None) -> Response | None:
        """429 for a client past its failed signatures (webhook_limits), 503 without Postgres."""
        try:
            if not await run_in_threadpool(webhook_limits.refused, self.pool, host):
                return None
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            log.warning("webhook: cannot check the client's failures, asking for a retry: %s", exc)
            return _answer(503, "the database is unavailable: send it again", **BUSY)
        return _answer(429, "too many failed signatures from your address", **LATER)

    async def _run(self, request: Request, handle: Callable[[bytes], Response]) -> Response:
        """Read the (capped) body, then handle it in the thread pool, IN_FLIGHT at a time (a
        client sending its body slowly holds no slot)."""
        body = await request.body()
        if self.slots.locked():
            return _answer(503, "too many webhook requests at once", **BUSY)
        host = request.client.host if request.client else None
        async with self.slots:
            try:
                if refused := await self._refused(host):
                    return refused
                return await run_in_threadpool(handle, body)
            except providers.Forged as exc:
                log.warning("webhook %s refused: %s", request.url.path, str(exc)[:200])
                await run_in_threadpool(webhook_limits.failed, self.pool, host)
                return _answer(403, "the signature does not hold")
            except providers.NotAnEvent as exc:
                return _answer(400, f"not an event: {str(exc)[:200]}")
            except (AttributeError, TypeError, KeyError) as exc:
                # A signed event whose fields are not of the documented types: not a 500.
                log.warning("webhook %s: unreadable event (%r)", request.url.path, exc)
                return _answer(400, "not an event in the provider's documented shape")

    # --- SES through SNS ---

    def _ses(self, body: bytes) -> Response:
        try:
            given = json.loads(body)
        except ValueError:
            raise providers.NotAnEvent("not JSON") from None
        if not isinstance(given, dict) or str(given.get("TopicArn")) not in self.topics:
            return _answer(403, "not a topic of ours (SENDDOCK_SNS_TOPIC_ARNS)")
        try:
            message = providers.verify_sns(body, self.cert, self.hosts)
            if message.type == "SubscriptionConfirmation" and message.subscribe_url:
                self._fetch(message.subscribe_url)  # the signature holds: confirm
                log.info("webhook ses: subscription to %s confirmed", message.topic)
                return JSONResponse({"confirmed": True})
        except FetchFailed as exc:
            log.warning("webhook ses: %s", exc)
            return _answer(503, "could not reach SNS: send it again", **BUSY)
        if message.type != "Notification":
            return JSONResponse({"new": False, "findings": 0})
        # SNS delivers a message again as it retries, and anyone may replay it: its MessageId
        # (signed) makes it one event, whatever unsigned bytes around it changed.
        identity = None
        if message.message_id:
            identity = f"{message.topic}\0{message.message_id}".encode("utf-8", "surrogatepass")
        if busy := self._confirm("ses", message.delivered):
            return busy
        return self._store("ses", body, message.findings, identity=identity)

    async def ses(self, request: Request) -> Response:
        if not self.topics:
            return _off()
        return await self._run(request, self._ses)

    # --- Mailgun ---

    def _mailgun(self, body: bytes) -> Response:
        key = self.settings.mailgun_signing_key
        assert key is not None
        event = providers.verify_mailgun(body, key.get_secret_value())
        signature = json.loads(body)["signature"]
        token = f"{signature.get('timestamp')}.{signature.get('token')}"
        identity = token.encode("utf-8", "surrogatepass")
        if busy := self._confirm("mailgun", providers.mailgun_deliveries(event)):
            return busy
        return self._store("mailgun", body, providers.mailgun_findings(event), identity=identity)

    async def mailgun(self, request: Request) -> Response:
        if self.settings.mailgun_signing_key is None:
            return _off()
        return await self._run(request, self._mailgun)

    # --- SendGrid ---

    async def sendgrid(self, request: Request) -> Response:
        key = self.sendgrid_key
        if key is None:
            return _off()
        signature = request.headers.get("x-twilio-email-event-webhook-signature")
        timestamp = request.headers.get("x-twilio-email-event-webhook-timestamp")

        def handle(body: bytes) -> Response:
            events = providers.verify_sendgrid(body, signature, timestamp, key)
            if busy := self._confirm("sendgrid", providers.sendgrid_deliveries(events)):
                return busy
            return self._store("sendgrid", body, providers.sendgrid_findings(events))

        return await self._run(request, handle)

    # --- Postmark ---

    def _postmark_auth(self, request: Request) -> bool:
        user = self.settings.postmark_webhook_user or ""
        password = self.settings.postmark_webhook_password
        want = f"{user}:{password.get_secret_value() if password else ''}".encode()
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        try:
            got = base64.b64decode(given.strip(), validate=True)
        except (binascii.Error, ValueError):
            got = b""
        return scheme.lower() == "basic" and hmac.compare_digest(got, want)

    def _postmark(self, body: bytes) -> Response:
        findings = providers.postmark_findings(body)
        # Postmark reports its own MessageID; ours is in the bounce itself ("Content", when
        # the webhook includes it), in the returned original's headers.
        content = json.loads(body).get("Content")
        returned = content.encode("utf-8", "replace") if isinstance(content, str) else None
        ours = parse(returned).message_id if returned is not None else None
        return self._store("postmark", body, findings, ours)

    async def postmark(self, request: Request) -> Response:
        s = self.settings
        if not s.postmark_webhook_user or s.postmark_webhook_password is None:
            return _off()
        host = request.client.host if request.client else None
        if refused := await self._refused(host):
            return refused
        if not self._postmark_auth(request):
            log.warning("webhook postmark refused: wrong credentials")
            await run_in_threadpool(webhook_limits.failed, self.pool, host)
            challenge = {"WWW-Authenticate": 'Basic realm="senddock webhooks"'}
            return _answer(401, "wrong credentials", **challenge)
        return await self._run(request, self._postmark)


def router(pool: Pool, settings: Settings) -> APIRouter:
    """The webhook routes, for the app to include."""
    hooks = Webhooks(pool, settings)
    routes = APIRouter(prefix="/webhooks", include_in_schema=False)
    routes.add_api_route("/ses", hooks.ses, methods=["POST"])
    routes.add_api_route("/mailgun", hooks.mailgun, methods=["POST"])
    routes.add_api_route("/sendgrid", hooks.sendgrid, methods=["POST"])
    routes.add_api_route("/postmark", hooks.postmark, methods=["POST"])
    return routes
