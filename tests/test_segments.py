"""Segments: a filter language parsed into parameterized SQL narrows a campaign's lists."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from senddock.audience import segments
from senddock.audience import subscribers as subscribers_api
from senddock.audience.lists import find_list
from senddock.audience.segment_filter import SegmentError, parse
from senddock.campaigns import NothingToSend, broadcast, create_campaign, status
from senddock.campaigns.audience import preview_count
from senddock.campaigns.broadcast import enqueue_all
from senddock.testing import Catcher
from support import Conn, ThreadWorker, seed_list, senddock, unfinished, wait_until, worker_env
from web_support import ServerFactory, make_token, servers

PEOPLE: list[tuple[str, dict[str, Any], str]] = [
    # address, attributes, created_at
    (
        "zoë@bücher.example",
        {"city": "Zürich", "plan": "pro", "vip": True, "address": {"zip": "8001"}},
        "2026-02-01",
    ),
    ("ada@example.org", {"city": "London", "plan": "team", "score": 7}, "2026-03-05"),
    ("bob@example.org", {"city": "London", "plan": "free", "score": 2.5}, "2025-11-20"),
    ("chloé@example.org", {"city": "Paris", "plan": "pro", "tags": ["x"]}, "2026-01-01"),
    ("dan@example.org", {}, "2026-06-30"),
    ("eve@example.org", {"city": "London", "plan": "pro", "churned": None}, "2026-04-10"),
]


def seed(conn: Conn, list_name: str = "news") -> None:
    for address, attributes, created in PEOPLE:
        sid = subscribers_api.add(conn, address, address.split("@")[0], attributes, (list_name,))
        conn.execute(
            "UPDATE subscribers SET created_at = %s WHERE id = %s",
            (datetime.fromisoformat(created).replace(tzinfo=UTC), sid),
        )


def draft(conn: Conn, **audience: str) -> int:
    """A draft to the list `news`, narrowed by `segment=` or `audience_filter=`."""
    return create_campaign(
        conn,
        name="c",
        list_name="news",
        subject="Hi {{ subscriber.name }}",
        from_addr="news@example.org",
        text_body="Hello\n",
        **audience,  # type: ignore[arg-type]
    )


def matching(conn: Conn, text: str) -> set[str]:
    """Who filter `text` selects, by address (through the count's own statement)."""
    found = set()
    for address, _, _ in PEOPLE:
        rows = segments.count(conn, f"({text}) and email = {_quoted(address)}")
        if rows:
            found.add(address)
    return found


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('attributes.city = "London"', {"ada", "bob", "eve"}),
        ('attributes.city = "London" and created_at >= 2026-01-01', {"ada", "eve"}),
        ('attributes.plan in ["pro", "team"]', {"zoë", "ada", "chloé", "eve"}),
        ('attributes.plan not in ["pro", "team"]', {"bob", "dan"}),  # not (in): no plan too
        ("exists attributes.vip", {"zoë"}),
        ("exists attributes.churned", {"eve"}),  # a JSON null is there
        ("not exists attributes.city", {"dan"}),
        ('not attributes.city = "London"', {"zoë", "chloé", "dan"}),
        ('attributes.city != "London"', {"zoë", "chloé"}),  # a missing one compares false
        ("attributes.score > 3", {"ada"}),
        ("attributes.score <= 2.5", {"bob"}),
        ('attributes.score = "7"', set()),  # a string is not the number 7
        ("attributes.vip = true", {"zoë"}),
        ('attributes.city = "Zürich"', {"zoë"}),
        ('attributes."city" = "Paris" or attributes.city = "Zürich"', {"chloé", "zoë"}),
        (
            '(attributes.city = "London" or attributes.city = "Paris")'
            ' and not attributes.plan = "free"',
            {"ada", "chloé", "eve"},
        ),
        ("created_at < 2026-01-01T00:00:01Z AND created_at > 2025-12-31T23:00+01:00", {"chloé"}),
        ('name = "zoë"', {"zoë"}),
        ('attributes.address.zip = "8001" and attributes."plan" IN ["pro"]', {"zoë"}),
    ],
)
def test_a_filter_selects_exactly_the_subscribers_it_names(
    conn: Conn, text: str, expected: set[str]
) -> None:
    seed(conn)
    names = {a.split("@")[0] for a in matching(conn, text)}
    assert names == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("'; drop table x; --", 'segment: unexpected character "\'" at column 1'),
        (
            'attributes.x = "a" or 1=1',
            "segment: expected a field (email, name, created_at, updated_at, attributes.KEY)"
            " at column 23",
        ),
        (
            'attributes.x = "a"; DROP TABLE subscribers',
            "segment: unexpected character ';' at column 19",
        ),
        ("attributes.city = ", "segment: expected a value at column 19"),
        ('attributes.city = "London" and created_at >= ', "segment: expected a value at column 46"),
        ('email = "a" --', "segment: unexpected character '-' at column 13"),
        ("attributes.x = London", "segment: expected a value at column 16"),
        (
            'created_at > "yesterday"',
            "segment: created_at compares with a date (2026-01-01) at column 14",
        ),
        ("exists email", "segment: exists takes an attribute (attributes.KEY) at column 8"),
        ("(attributes.x = 1", "segment: expected ')' at column 18"),
        ('attributes.x = "unterminated', "segment: unterminated or malformed string at column 16"),
        ("attributes = 1", "segment: expected '.' and an attribute name at column 12"),
        ("", "segment: the filter is empty"),
        (
            "attributes.x = 1 attributes.y = 2",
            "segment: expected and, or or the end of the filter at column 18",
        ),
        ("created_at > 2026-13-45", "segment: 2026-13-45 is not a date at column 14"),
        ("not " * 40 + "exists attributes.x", "segment: nested more than 32 deep at column 129"),
    ],
)
def test_a_bad_filter_is_one_line_with_its_column(text: str, message: str) -> None:
    with pytest.raises(SegmentError) as caught:
        parse(text)
    assert caught.value.message == message
    assert caught.value.field == "filter" and caught.value.status == 422


def test_values_that_look_like_sql_are_data(conn: Conn) -> None:
    """A string full of SQL is compared as a value: it matches the one subscriber holding it
    and nothing is dropped or widened."""
    hostile = "'; DROP TABLE subscribers; -- \" or 1=1"
    seed(conn)
    subscribers_api.add(conn, "mallory@example.org", "m", {"city": hostile}, ("news",))
    text = f"attributes.city = {_quoted(hostile)} or attributes.{_quoted(hostile)} = 1"
    assert segments.count(conn, text) == 1
    assert segments.count(conn, 'attributes."; drop table x; --" = "a"') == 0
    row = conn.execute("SELECT count(*) AS n FROM subscribers").fetchone()
    assert row is not None and row["n"] == len(PEOPLE) + 1


def test_a_broadcast_with_a_segment_reaches_exactly_the_matching_subscribers(
    conn: Conn, db_url: str, catcher: Catcher
) -> None:
    seed(conn)
    seed_list(conn, "other", [p[0] for p in PEOPLE])  # the same people, another list: not sent
    segments.add(
        conn, "pro in Europe", 'attributes.plan = "pro" and not attributes.city = "London"'
    )
    cid = draft(conn, segment="pro in Europe")
    assert preview_count(conn, cid) == 2
    # The segment changes after the send: the broadcast keeps the filter it started with.
    bid, _, _ = broadcast(conn, cid)
    conn.execute("UPDATE segments SET filter = 'exists attributes.city'")
    enqueue_all(conn, bid, 1)  # chunks of one: every chunk narrows by the same filter
    with ThreadWorker(db_url, catcher.url):
        assert wait_until(lambda: unfinished(conn, bid) == 0, 30)
    # IDNA domains go as A-labels (README, "The guarantee").
    assert catcher.count_by_rcpt() == {"zoë@xn--bcher-kva.example": 1, "chloé@example.org": 1}
    st = status(conn, cid)
    assert (st.status, st.counts.total, st.counts.sent) == ("sent", 2, 2)


def test_a_campaign_with_its_own_filter_matching_nobody_is_refused(
    conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(conn)
    # A first chunk of one membership: who is left past it is asked of anyone_left, filtered.
    monkeypatch.setattr(sys.modules["senddock.campaigns.broadcast"], "FIRST_CHUNK", 1)
    cid = draft(conn, audience_filter='attributes.city = "Atlantis"')
    assert preview_count(conn, cid) == 0
    with pytest.raises(NothingToSend, match="matches its filter"):
        broadcast(conn, cid)
    assert status(conn, cid).status == "draft"


def test_segment_cli_saves_counts_and_previews_and_refuses_bad_filters_in_one_line(
    conn: Conn, db_url: str, catcher: Catcher, tmp_path: Path
) -> None:
    seed(conn)
    env = worker_env(db_url, catcher.url)
    body = tmp_path / "body.txt"
    body.write_text("Hello\n", encoding="utf-8")

    def create(*audience: str) -> subprocess.CompletedProcess[str]:
        return senddock(
            env, "campaign", "create", "--name", "L", "--list", "news", "--subject", "Hi",
            "--from", "news@example.org", "--text-file", str(body), *audience,
        )  # fmt: skip

    broken = senddock(env, "segment", "add", "broken", "attributes.city = ")
    assert broken.returncode != 0
    assert broken.stderr.strip() == "senddock: error: segment: expected a value at column 19"
    bad = create("--filter", "1=1")
    assert bad.returncode != 0
    assert bad.stderr.strip() == (
        "senddock: error: segment: expected a field (email, name, created_at, updated_at,"
        " attributes.KEY) at column 1"
    )
    done = senddock(env, "segment", "add", "londoners", 'attributes.city = "London"')
    assert done.returncode == 0, done.stderr
    shown = senddock(env, "segment", "show", "londoners")
    assert 'attributes.city = "London"' in shown.stdout and "3 subscribers" in shown.stdout
    counted = senddock(env, "segment", "count", "londoners", "--list", "news")  # by name
    assert counted.stdout.strip() == "3", counted.stderr
    made = create("--segment", "londoners")
    assert made.returncode == 0, made.stderr
    preview = senddock(env, "campaign", "preview", made.stdout.strip())
    assert preview.stdout.strip() == "3 recipients (segment londoners)", preview.stderr
    refused = senddock(env, "segment", "delete", "londoners")
    assert refused.returncode != 0
    assert refused.stderr.strip() == (
        "senddock: error: segment 'londoners' is named by a campaign: it cannot be deleted"
    )
    own = create("--filter", "exists attributes.vip")
    assert own.returncode == 0, own.stderr
    assert senddock(env, "campaign", "preview", own.stdout.strip()).stdout.strip() == (
        "1 recipient (filter exists attributes.vip)"
    )
    rows = conn.execute("SELECT name FROM segments").fetchall()
    assert [r["name"] for r in rows] == ["londoners"]  # the broken one was never stored


def test_saved_segments_by_name_list_count_and_delete(conn: Conn) -> None:
    seed(conn)
    seed_list(conn, "vip-list", ["zoë@bücher.example", "ada@example.org"])
    segments.add(conn, "  zürich ", 'attributes.city = "Zürich"')
    with pytest.raises(segments.SegmentInUse, match="exists already"):
        segments.add(conn, "zürich", "exists attributes.x")
    with pytest.raises(SegmentError, match="at column 1"):
        segments.add(conn, "bad", "; select 1")
    assert [g.name for g in segments.all_segments(conn)] == ["zürich"]
    assert segments.count(conn, segments.find(conn, "zürich").filter) == 1
    ids = [find_list(conn, "vip-list")]
    assert segments.count(conn, "exists attributes.city", ids) == 2
    assert segments.count(conn, 'attributes.plan = "pro"', ids) == 1
    segments.delete(conn, "zürich")
    with pytest.raises(segments.UnknownSegment):
        segments.delete(conn, "zürich")


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    yield from servers(db_url)


def test_segments_api_saves_counts_narrows_a_campaign_and_refuses_injection(
    conn: Conn, db_url: str, serve: ServerFactory
) -> None:
    seed(conn)
    server = serve(workers=False)
    with server.client(make_token(db_url)) as api:
        bad = api.post("/api/v1/segments", json={"name": "x", "filter": "'; drop table x; --"})
        assert bad.status_code == 422
        assert bad.json() == {
            "error": {
                "field": "filter",
                "message": 'segment: unexpected character "\'" at column 1',
            }
        }
        made = api.post(
            "/api/v1/segments", json={"name": "zürich", "filter": 'attributes.city = "Zürich"'}
        )
        assert made.status_code == 201, made.text
        segment = made.json()
        assert (segment["name"], segment["count"]) == ("zürich", 1)
        again = api.post(
            "/api/v1/segments", json={"name": "zürich", "filter": "exists attributes.x"}
        )
        assert again.status_code == 409
        assert [g["name"] for g in api.get("/api/v1/segments").json()] == ["zürich"]
        count = api.get(
            "/api/v1/segments/count", params={"filter": 'attributes.x = "a" or 1=1', "list": "news"}
        )
        assert count.status_code == 422 and count.json()["error"]["field"] == "filter"
        count = api.get(
            "/api/v1/segments/count",
            params={"filter": 'attributes.plan in ["pro", "team"]', "list": "news"},
        )
        assert count.json()["count"] == 4
        campaign = api.post(
            "/api/v1/campaigns",
            json={
                "name": "z",
                "lists": ["news"],
                "subject": "Hi",
                "from_addr": "news@example.org",
                "text_body": "Hello",
                "segment": "zürich",
            },
        )
        assert campaign.status_code == 201, campaign.text
        cid = campaign.json()["id"]
        audience = api.get(f"/api/v1/campaigns/{cid}/audience").json()
        assert audience == {"count": 1, "filter": 'attributes.city = "Zürich"', "segment": "zürich"}
        refused = api.delete(f"/api/v1/segments/{segment['id']}")
        assert refused.status_code == 409
        other = api.post(
            "/api/v1/segments", json={"name": "gone", "filter": "not exists attributes.city"}
        ).json()
        assert api.delete(f"/api/v1/segments/{other['id']}").status_code == 200
        assert api.get(f"/api/v1/segments/{other['id']}").status_code == 404
