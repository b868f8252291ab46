"""`senddock bounces list --limit N`: the newest N findings, and how many more there are."""

from __future__ import annotations

import json
from pathlib import Path

from senddock.bounces.store import receive
from senddock.bounces.verp import ReturnPath
from support import Conn, senddock
from test_bounce_cli import env_for

RAW = (Path(__file__).parent / "bounces" / "mailbox-full.eml").read_bytes()


def test_list_shows_the_newest_limit_and_says_how_many_more(conn: Conn, db_url: str) -> None:
    path = ReturnPath.parse("bounces.example.org")
    for i in range(5):  # five unmatched soft bounces, each to another return path
        raw = RAW.replace(b"erin@example.net", f"reader{i}@example.net".encode())
        receive(conn, "pipe", raw, f"b+{i}@bounces.example.org", path, b"k" * 32)
    env = env_for(db_url)
    shown = senddock(env, "bounces", "list", "--limit", "2")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert [line.split()[4] for line in lines[:2]] == ["reader4@example.net", "reader3@example.net"]
    assert lines[2:] == ["3 more (see --limit)"]
    as_json = senddock(env, "bounces", "list", "--json", "--limit", "4")
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [r["recipient"] for r in rows] == [f"reader{i}@example.net" for i in (4, 3, 2, 1)]
    assert "matching" not in rows[0] and as_json.stderr.strip() == "1 more (see --limit)"
    everything = senddock(env, "bounces", "list")  # the default, 100, holds them all
    assert len(everything.stdout.splitlines()) == 5 and "more" not in everything.stdout
    refused = senddock(env, "bounces", "list", "--limit", "0")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
