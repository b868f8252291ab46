"""One count (issue 20): every surface shows the same counts, before and after retention deletes a
finished broadcast's jobs. A real `senddock serve` with its worker sends through a real SMTP
catcher; the real cleaner purges; the CLI (campaign status and list), the API (list and detail),
the dashboard list and /metrics are read as a person or a scraper reads them.

Without queue/counts.py (on main before it) the API list and the dashboard list showed 0 sent
after the purge, and /metrics lost the purged messages.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from senddock.delivery import cleaner
from senddock.testing import Catcher
from support import Conn, seed_list, senddock, wait_until, worker_env
from web_support import ServerFactory, make_admin, make_token, servers

EMAIL, PASSWORD = "admin@example.org", "correct horse battery staple"
KEYS = ("total", "pending", "sending", "retry", "sent", "failed", "cancelled", "bounced")
CAMPAIGN = {
    "name": "Purged news",
    "lists": ["news"],
    "subject": "Hello {{ subscriber.name }}",
    "from_addr": "News <news@example.org>",
    "text_body": "Hi {{ subscriber.name }}.\n",
}


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    yield from servers(db_url)


def _surfaces(
    db_url: str, api: httpx.Client, dash: httpx.Client, cid: int, smtp_url: str
) -> dict[str, dict[str, Any]]:
    """The counts of campaign `cid` as each surface shows them."""
    env = worker_env(db_url, smtp_url)
    done = senddock(env, "campaign", "status", str(cid), "--json")
    assert done.returncode == 0, done.stderr
    cli = json.loads(done.stdout)
    done = senddock(env, "campaign", "list", "--json")
    assert done.returncode == 0, done.stderr
    cli_list = {c["id"]: c for c in json.loads(done.stdout)}[cid]
    detail = api.get(f"/api/v1/campaigns/{cid}").json()
    listed = {c["id"]: c for c in api.get("/api/v1/campaigns").json()["items"]}[cid]
    html = dash.get("/").text
    row = re.search(rf'<tr data-campaign="{cid}">(.*?)</tr>', html, re.S)
    assert row is not None, html
    cells = dict(re.findall(r'data-field="(\w+)">([^<]*)<', row.group(1)))
    metrics = api.get("/metrics").text

    def metric(sample: str) -> int:
        m = re.search(r"^" + re.escape(sample) + r" (\S+)$", metrics, re.M)
        return int(float(m.group(1))) if m else 0

    return {
        "cli": {k: cli[k] for k in KEYS},
        "cli list": {k: cli_list[k] for k in ("total", "sent", "failed", "cancelled")},
        "api detail": {k: detail[k] for k in KEYS},
        "api list": {k: listed[k] for k in ("total", "sent", "failed")},
        "dashboard list": {k: int(cells[k]) for k in ("total", "sent", "failed", "cancelled")},
        # The latest problem, read live, then from the copy the cleaner froze as JSON.
        "last problem": {"cli": cli["last_problem"], "api detail": detail["last_problem"]},
        "metrics": {
            "sent": metric('senddock_messages{outcome="sent"}'),
            "bounced": metric('senddock_messages{outcome="failed_bounced"}'),
            "pending": metric('senddock_queue_jobs{status="pending"}'),
        },
    }


async def _purge(url: str) -> int:
    async with await AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as a:
        return await cleaner.clean(a, 90, 1000)


def test_every_surface_shows_the_same_counts_before_and_after_retention_purges_the_jobs(
    db_url: str, conn: Conn, catcher: Catcher, serve: ServerFactory
) -> None:
    seed_list(conn, "news", [f"r{n}@example.org" for n in range(7)] + ["bounce-x@example.org"])
    make_admin(db_url, EMAIL, PASSWORD)
    server = serve(catcher.url, workers=True)
    api = server.client(make_token(db_url))
    dash = httpx.Client(base_url=server.url, timeout=30)
    with api, dash:
        token = re.search(r'name="csrf" value="([^"]+)"', dash.get("/login").text)
        assert token is not None
        login = {"csrf": token.group(1), "email": EMAIL, "password": PASSWORD, "next": "/"}
        assert dash.post("/login", data=login).status_code == 303
        cid = api.post("/api/v1/campaigns", json=CAMPAIGN).json()["id"]
        assert api.post(f"/api/v1/campaigns/{cid}/send").status_code == 202

        def sent() -> bool:
            return bool(api.get(f"/api/v1/campaigns/{cid}").json()["status"] == "sent")

        assert wait_until(sent, timeout=60, every=0.2)
        before = _surfaces(db_url, api, dash, cid, catcher.url)
        expected = {"total": 8, "sent": 7, "failed": 1, "bounced": 1, "pending": 0}
        problem = before["last problem"]["cli"]
        assert problem and "550" in problem, before  # the bounce's reply
        assert before["last problem"]["api detail"] == problem
        for surface, counts in before.items():
            shown = {k: v for k, v in counts.items() if k in expected}
            assert shown == {k: expected[k] for k in shown}, (surface, counts)

        conn.execute(
            "UPDATE broadcasts SET finished_at = now() - interval '91 days' WHERE campaign_id = %s",
            (cid,),
        )
        asyncio.run(_purge(db_url))
        left = conn.execute(
            "SELECT count(*) AS n FROM broadcast_jobs j JOIN campaigns c"
            " ON c.broadcast_id = j.broadcast_id WHERE c.id = %s",
            (cid,),
        ).fetchone()
        assert left is not None and left["n"] == 0, "retention did not delete the jobs"
        after = _surfaces(db_url, api, dash, cid, catcher.url)
    assert after == before
