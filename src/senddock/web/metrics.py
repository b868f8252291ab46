"""/readyz and /metrics. Metrics are read from Postgres at scrape time, so every `serve`
process (and every worker) shows the same numbers: the queue is the truth.

/metrics needs the API token like /api/v1 (it names campaigns and counts); point Prometheus'
`authorization: {credentials: <token>}` at it. /readyz needs none.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector
from psycopg_pool import PoolTimeout

from senddock.db import check_current, sql
from senddock.db.migrate import MigrationError
from senddock.queue.counts import (
    FAILURES,
    JOB_STATUSES,
    LATER,
    WAITING,
    all_counts,
    counts_of,
    shown_status,
)
from senddock.web import auth
from senddock.web.errors import RESPONSES
from senddock.web.schemas import Ready

log = logging.getLogger("senddock.web")

router = APIRouter()

NO_DATABASE = "the database check failed (the server log says why)"
SCHEMA_BEHIND = "the database schema is not current: run 'senddock migrate'"

QUERIES = sql.load(__package__, "metrics.sql")


class QueueCollector(Collector):
    """Reads the queue at each scrape (the counters, and a few aggregate queries)."""

    def __init__(self, conn: psycopg.Connection[dict[str, Any]], lease_seconds: float) -> None:
        self.conn = conn
        self.lease = lease_seconds

    def collect(self) -> Iterator[Metric]:
        c = self.conn
        # The one count (queue/counts.py), of every broadcast: a few counter rows each, and
        # the same before and after retention deletes a broadcast's jobs.
        counts = all_counts(c)
        outcome = GaugeMetricFamily(
            "senddock_messages", "Finished messages by outcome (all time)", labels=["outcome"]
        )
        for name, n in (("sent", counts.sent), ("cancelled", counts.cancelled)):
            if n:
                outcome.add_metric([name], float(n))
        unknown = counts.failed - sum(getattr(counts, f) for f in FAILURES)
        for failure, n in (*((f, getattr(counts, f)) for f in FAILURES), ("unknown", unknown)):
            if n:
                outcome.add_metric([f"failed_{failure}"], float(n))
        yield outcome

        later = GaugeMetricFamily(
            "senddock_later_reports",
            "Jobs reported after the relay's 250, by kind (each job once per kind, all time)",
            labels=["kind"],
        )
        for kind, key in LATER.items():
            later.add_metric([kind], float(getattr(counts, key)))
        yield later

        depth = GaugeMetricFamily(
            "senddock_queue_jobs", "Jobs by status (all broadcasts)", labels=["status"]
        )
        for status in JOB_STATUSES:
            depth.add_metric([status], float(getattr(counts, status)))
        yield depth

        lat = c.execute(QUERIES["latency"]).fetchone()
        assert lat is not None
        yield SummaryMetricFamily(
            "senddock_claim_to_send_seconds",
            "Seconds from claim to the relay's acceptance, messages sent in the last 15 minutes",
            count_value=int(lat["n"]),
            sum_value=float(lat["total"]),
        )
        quant = GaugeMetricFamily(
            "senddock_claim_to_send_seconds_quantile",
            "Quantiles of claim-to-send seconds, messages sent in the last 15 minutes",
            labels=["quantile"],
        )
        for q, value in zip(("0.5", "0.9", "0.99"), lat["q"] or [], strict=False):
            if value is not None:
                quant.add_metric([q], float(value))
        yield quant

        replies = GaugeMetricFamily(
            "senddock_smtp_replies",
            "Jobs by the class of the last SMTP reply (2xx, 4xx, 5xx)",
            labels=["class"],
        )
        found = {str(r["class"]): int(r["n"]) for r in c.execute(QUERIES["replies"]).fetchall()}
        for klass in ("2xx", "3xx", "4xx", "5xx"):
            replies.add_metric([klass], float(found.get(klass, 0)))
        yield replies

        open_ = c.execute(QUERIES["open_campaigns"]).fetchall()
        of = counts_of(c, [int(r["broadcast_id"]) for r in open_])
        states = Counter(shown_status(r["status"], of[int(r["broadcast_id"])]) for r in open_)
        campaigns = GaugeMetricFamily(
            "senddock_open_campaigns",
            "Campaigns sending or paused, by the state a person reads (waiting for a decision:"
            " only unconfirmed jobs are left)",
            labels=["state"],
        )
        for state in ("sending", "paused", WAITING):
            campaigns.add_metric([state], float(states.get(state, 0)))
        yield campaigns

        w = c.execute(QUERIES["workers"], (self.lease,)).fetchone()
        assert w is not None
        yield GaugeMetricFamily(
            "senddock_workers_live",
            "Workers whose heartbeat is younger than the lease",
            value=float(w["live"]),
        )
        yield GaugeMetricFamily(
            "senddock_workers_registered", "Registered worker rows", value=float(w["registered"])
        )

        d = c.execute(QUERIES["deaths"]).fetchone()
        assert d is not None
        yield CounterMetricFamily(
            "senddock_worker_deaths",
            "Worker processes found dead (killed, crashed, or silent past the lease)",
            value=float(d["n"]),
        )
        last = GaugeMetricFamily(
            "senddock_worker_last_death_timestamp_seconds",
            "When the latest worker death was found (Unix time), labelled with its reason",
            labels=["reason"],
        )
        if d["at"] is not None:
            last.add_metric([str(d["reason"])[:200]], float(d["at"]))
        yield last


def scrape(request: Request) -> bytes:
    """The Prometheus text of one scrape."""
    settings = request.app.state.settings
    with request.app.state.pool.connection() as conn:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(QueueCollector(conn, settings.lease_seconds))
        return generate_latest(registry)


@router.get(
    "/metrics",
    tags=["operations"],
    summary="Prometheus metrics (needs the API token)",
    dependencies=[Depends(auth.require_api_auth)],
    responses={
        **RESPONSES,
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
    },
    response_class=Response,
)
def metrics(request: Request) -> Response:
    return Response(scrape(request), media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get(
    "/readyz",
    tags=["operations"],
    summary="Ready: the database answers and its schema is current (else 503)",
    response_model=Ready,
    responses={503: {"model": Ready, "description": "Not ready"}},
)
def readyz(request: Request) -> Response:
    """Anyone may ask, so the answer names only the check that failed; why (a host, a
    database name, a missing migration) goes to the log."""
    try:
        with request.app.state.pool.connection(timeout=5) as conn:
            check_current(conn)
    except MigrationError as exc:
        log.warning("not ready: %s", exc)
        body = Ready(ready=False, database=True, migrations=False, message=SCHEMA_BEHIND)
        return JSONResponse(body.model_dump(), status_code=503)
    except (psycopg.Error, PoolTimeout) as exc:
        log.warning("not ready: the database check failed: %s", " ".join(str(exc).split()))
        body = Ready(ready=False, database=False, migrations=False, message=NO_DATABASE)
        return JSONResponse(body.model_dump(), status_code=503)
    return JSONResponse(Ready(ready=True, database=True, migrations=True).model_dump())
