"""schemathesis against the real `senddock serve` process over HTTP, with an API token: every
operation of /openapi.json gets generated requests; none may answer 5xx, and every answer must
match the documented status codes, content types and response schemas.

Deterministic for CI: hypothesis derandomizes, with a bounded number of examples per operation.
A summary (operations, examples, statuses, failures) is printed at the end of the module.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from senddock.db import connect
from senddock.testing import Catcher
from support import seed_list
from web_support import Server, make_token, start_server

MAX_EXAMPLES = 25
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]

STATS: dict[str, Counter[str]] = {}
FAILED: set[str] = set()
FAILURES: list[str] = []


@pytest.fixture(scope="module")
def live(pg_url: str) -> Iterator[tuple[Server, str]]:
    """One server for the module (no workers: sends only enqueue), a token, some rows."""
    with connect(pg_url) as conn:
        seed_list(conn, "news", [f"fuzz{n}@example.org" for n in range(3)])
    with Catcher() as catcher:
        server = start_server(pg_url, catcher.url, workers=False)
        try:
            token = make_token(pg_url, "schemathesis")
            with server.client(token) as c:
                c.post(
                    "/api/v1/campaigns",
                    json={
                        "name": "fuzz",
                        "lists": ["news"],
                        "subject": "Hi",
                        "from_addr": "news@example.org",
                        "text_body": "Hello",
                    },
                )
            yield server, token
        finally:
            server.stop()


@pytest.fixture(scope="module", autouse=True)
def summary(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print what schemathesis did once the module is done (shown even when all pass)."""
    yield
    statuses: Counter[str] = Counter()
    for c in STATS.values():
        statuses.update(c)
    lines = [
        "",
        "schemathesis summary:",
        f"  operations tested: {len(STATS)}",
        f"  examples (HTTP requests): {sum(statuses.values())}",
        f"  statuses: {dict(sorted(statuses.items()))}",
        f"  operations with failures: {len(FAILED)} {sorted(FAILED)}",
    ]
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print("\n".join(lines))


def _exercise(
    operation: Any, mode: GenerationMode, server: Server, token: str
) -> tuple[Counter[str], list[str]]:
    """Run MAX_EXAMPLES generated requests of one operation: (statuses, failure texts)."""
    statuses: Counter[str] = Counter()
    failures: list[str] = []
    headers = {"Authorization": f"Bearer {token}"}

    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        phases=[Phase.explicit, Phase.generate],
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        response = case.call(base_url=server.url, headers=headers, timeout=30)
        statuses[str(response.status_code)] += 1
        try:
            case.validate_response(response, checks=CHECKS, headers=headers)
        except Exception as exc:
            text = " ".join(str(exc).split())[:600]
            failures.append(
                f"{case.method} {case.formatted_path} -> {response.status_code}: {text}"
            )
            raise

    try:
        run()
    except Unsatisfiable:  # nothing to generate: e.g. negative cases of an operation with no input
        pass
    except BaseException as exc:  # hypothesis re-raises the (shrunk) failure; keep going
        if isinstance(exc, KeyboardInterrupt):
            raise
        if not failures:
            failures.append(f"{operation.label}: {' '.join(str(exc).split())[:600]}")
    return statuses, failures


def test_every_operation_answers_within_its_schema_and_never_5xx(
    live: tuple[Server, str],
) -> None:
    server, token = live
    auth = {"Authorization": f"Bearer {token}"}  # the schema needs what the API needs
    schema = schemathesis.openapi.from_url(server.url + "/openapi.json", headers=auth)
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) >= 37  # with PATCH, clone, DELETE, archive, unarchive (issue 22)
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            statuses, failures = _exercise(operation, mode, server, token)
            STATS.setdefault(operation.label, Counter()).update(statuses)
            if failures:
                FAILED.add(operation.label)
                FAILURES.extend(failures[:3])
    assert not FAILURES, "\n".join(FAILURES)


def test_the_docs_page_and_the_schema_are_served(live: tuple[Server, str]) -> None:
    """With a token (tests/test_api_docs.py: refused without one, no file from elsewhere)."""
    server, token = live
    headers = {"Authorization": f"Bearer {token}"}
    docs = httpx.get(server.url + "/docs", headers=headers)
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    spec = httpx.get(server.url + "/openapi.json", headers=headers).json()
    assert spec["info"]["title"] == "SendDock"
    assert "/api/v1/campaigns/{campaign_id}" in spec["paths"]


STATEFUL_EXAMPLES = 10
STATEFUL_STEPS = 6


def test_sequences_of_operations_linked_by_their_ids_never_5xx(
    live: tuple[Server, str],
) -> None:
    """The stateful phase: schemathesis chains operations through the links it infers (a
    created campaign's id into GET /campaigns/{id}, …); bounded to run in well under a
    minute."""
    server, token = live
    auth = {"Authorization": f"Bearer {token}"}
    schema = schemathesis.openapi.from_url(server.url + "/openapi.json", headers=auth)
    base = schema.as_state_machine()

    class Machine(base):  # type: ignore[valid-type,misc]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": server.url, "headers": auth, "timeout": 30}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            statuses = STATS.setdefault("stateful", Counter())
            statuses[str(response.status_code)] += 1
            case.validate_response(response, checks=CHECKS, headers=auth)

    started = time.monotonic()
    Machine.run(
        settings=settings(
            max_examples=STATEFUL_EXAMPLES,
            stateful_step_count=STATEFUL_STEPS,
            derandomize=True,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            phases=[Phase.generate],
        )
    )
    assert time.monotonic() - started < 60
