"""Campaigns you can change through the REST API of a real `senddock serve`: PATCH a draft,
POST …/clone, DELETE a draft, POST …/archive and …/unarchive, and the 409s that keep what a
broadcast sends as it went."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support import Conn, seed_list
from web_support import ServerFactory, make_token, servers

DRAFT = {
    "name": "Frühling",
    "lists": ["news"],
    "subject": "Hallo {{ subscriber.name }}",
    "from_addr": "Nëws <news@example.org>",
    "text_body": "Hallo!\n",
}


@pytest.fixture
def api(db_url: str, conn: Conn) -> Iterator[httpx.Client]:
    seed_list(conn, "news", ["zoë@bücher.example", "ada@example.com"])
    seed_list(conn, "vip", ["björk@insel.example"])
    factory: Iterator[ServerFactory] = servers(db_url)
    start = next(factory)
    # A default install's policy on reserved domains (conftest allows them): see the end.
    server = start(workers=False, env={"SENDDOCK_ALLOW_RESERVED_DOMAINS": "0"})
    with server.client(make_token(db_url)) as c:
        yield c
    next(factory, None)


def error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    return dict(r.json()["error"])


def test_a_campaign_changes_through_the_api_as_far_as_its_broadcast_allows(
    api: httpx.Client, conn: Conn
) -> None:
    """PATCH a draft, then 409 for what a broadcast sends; then clone, delete, archive (one
    server for both: starting one is the cost). Fails without PATCH /campaigns/{id} (405)."""
    cid = api.post("/api/v1/campaigns", json=DRAFT).json()["id"]
    r = api.patch(
        f"/api/v1/campaigns/{cid}",
        json={"subject": "Neu {{ subscriber.name }}", "lists": ["news", "vip"], "reply_to": ""},
    )
    assert r.status_code == 200, r.text
    row = conn.execute("SELECT subject FROM campaigns WHERE id = %s", (cid,)).fetchone()
    assert row is not None and row["subject"] == "Neu {{ subscriber.name }}"
    lists = api.get("/api/v1/campaigns").json()["items"][0]["lists"]
    assert lists == ["news", "vip"]
    bad = error(api.patch(f"/api/v1/campaigns/{cid}", json={"html_body": "{{ nope }}"}), 422)
    assert bad["field"] == "html_body" and "nope is undefined" in bad["message"]
    assert (
        error(api.patch(f"/api/v1/campaigns/{cid}", json={"lists": ["gone"]}), 422)["field"]
        == "lists"
    )
    # The Markdown body and a filter of its own, then the filter gone again (issue 22).
    r = api.patch(
        f"/api/v1/campaigns/{cid}",
        json={"markdown_body": "# Hallo {{ subscriber.name }}", "filter": 'attributes.x = "ü"'},
    )
    assert r.status_code == 200, r.text
    row = conn.execute(
        "SELECT markdown_body, audience_filter FROM campaigns WHERE id = %s", (cid,)
    ).fetchone()
    assert row == {
        "markdown_body": "# Hallo {{ subscriber.name }}",
        "audience_filter": 'attributes.x = "ü"',
    }
    bad = error(api.patch(f"/api/v1/campaigns/{cid}", json={"filter": "x'; DROP TABLE s"}), 422)
    assert bad["field"] == "filter"
    assert error(api.patch(f"/api/v1/campaigns/{cid}", json={"layout": "gone"}), 422)["field"] == (
        "layout"
    )
    assert api.patch(f"/api/v1/campaigns/{cid}", json={"filter": ""}).status_code == 200
    row = conn.execute("SELECT audience_filter FROM campaigns WHERE id = %s", (cid,)).fetchone()
    assert row == {"audience_filter": None}
    assert api.post(f"/api/v1/campaigns/{cid}/send").status_code == 202
    refused = error(api.patch(f"/api/v1/campaigns/{cid}", json={"subject": "Late"}), 409)
    assert refused["field"] == "subject" and "sending" in refused["message"]
    renamed = api.patch(f"/api/v1/campaigns/{cid}", json={"name": "Frühling (sent)"})
    assert renamed.status_code == 200 and renamed.json()["name"] == "Frühling (sent)"

    clone_delete_and_archive(api)
    reserved = error(api.post("/api/v1/subscribers", json={"email": "zoë@bücher.test"}), 422)
    assert reserved["field"] == "email" and ".test is a reserved domain" in reserved["message"]


def clone_delete_and_archive(api: httpx.Client) -> None:
    """Clone (a cancelled campaign too), delete only a draft, archive only a finished one.
    Fails without the routes (405/404)."""
    cid = api.post("/api/v1/campaigns", json=DRAFT).json()["id"]
    draft_archive = error(api.post(f"/api/v1/campaigns/{cid}/archive"), 409)
    assert "only a sent or cancelled" in draft_archive["message"]
    assert api.post(f"/api/v1/campaigns/{cid}/send").status_code == 202
    assert "only a draft" in error(api.delete(f"/api/v1/campaigns/{cid}"), 409)["message"]
    assert api.post(f"/api/v1/campaigns/{cid}/cancel").status_code == 200
    copy = api.post(f"/api/v1/campaigns/{cid}/clone", json={"name": "Noch mal"})
    assert copy.status_code == 201 and copy.json()["status"] == "draft"
    assert copy.json()["name"] == "Noch mal"
    plain = api.post(f"/api/v1/campaigns/{cid}/clone")
    assert plain.status_code == 201 and plain.json()["name"] == "Frühling (copy)"

    assert api.post(f"/api/v1/campaigns/{cid}/archive").status_code == 200
    listed = [c["id"] for c in api.get("/api/v1/campaigns").json()["items"]]
    assert cid not in listed and copy.json()["id"] in listed
    archived = api.get("/api/v1/campaigns", params={"archived": "true"}).json()
    assert [c["id"] for c in archived["items"]] == [cid] and archived["total"] == 1
    assert api.post(f"/api/v1/campaigns/{cid}/unarchive").status_code == 200
    assert cid in [c["id"] for c in api.get("/api/v1/campaigns").json()["items"]]

    gone = plain.json()["id"]
    assert api.delete(f"/api/v1/campaigns/{gone}").status_code == 200
    assert error(api.get(f"/api/v1/campaigns/{gone}"), 404)
    assert error(api.delete(f"/api/v1/campaigns/{gone}"), 404)
