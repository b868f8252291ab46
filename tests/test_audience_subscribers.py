"""Subscribers one at a time through the real CLI: add, update, show, remove."""

from __future__ import annotations

import json
from pathlib import Path

from senddock.campaigns import broadcast
from support import Conn, jobs, new_campaign, senddock, worker_env


def test_add_update_show_and_remove_a_subscriber(db_url: str, conn: Conn) -> None:
    env = worker_env(db_url, "smtp://127.0.0.1:1?tls=none")

    def run(*args: str) -> str:
        proc = senddock(env, "subscribers", *args)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def refused(*args: str) -> str:
        proc = senddock(env, "subscribers", *args)
        assert proc.returncode != 0, proc.stdout
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        return lines[0]

    sid = int(
        run(
            "add",
            "Ada@Example.com",
            "--name",
            "Ada",
            "--attr",
            "city=London",
            "--list",
            "news",
            "--list",
            "dev",
        )
    )
    assert "already a subscriber" in refused("add", "ada@example.com")
    assert "CR or LF" in refused("add", "eve@example.com", "--name", "Eve\nBcc: x")
    assert "invalid address" in refused("add", "nobody")

    run(
        "update",
        "ada@example.com",
        "--name",
        "Ada Lovelace",
        "--attr",
        "plan=pro",
        "--attributes",
        '{"city": null, "n": 3}',
        "--list",
        "extra",
    )
    shown = json.loads(run("show", "ADA@example.com", "--json"))
    assert shown["id"] == sid and shown["name"] == "Ada Lovelace"
    assert shown["attributes"] == {"plan": "pro", "n": 3}
    assert {m["name"]: m["status"] for m in shown["lists"]} == {
        "news": "confirmed",
        "dev": "confirmed",
        "extra": "confirmed",
    }
    assert shown["suppressed"] is None and shown["messages"] == []
    assert "no subscriber" in refused("show", "zed@example.com")

    run("add", "bob@example.com", "--list", "news")
    assert "already another subscriber" in refused(
        "update", "bob@example.com", "--email", "ada@example.com"
    )

    # Off one list: later campaigns to that list skip her; she stays on the others.
    assert "removed from 'news'" in run("remove", "ada@example.com", "--list", "news")
    bid, total, _ = broadcast(conn, new_campaign(conn, "news"))
    assert sorted(jobs(conn, bid)) == ["bob@example.com"] and total == 1
    text = run("show", "ada@example.com")
    assert "list 'dev': confirmed" in text and "'news'" not in text

    # Bob has delivery history: his row stays for it, on no list. Ada has none: deleted.
    assert "kept for the history of 1 message)" in run("remove", "bob@example.com")
    assert json.loads(run("show", "bob@example.com", "--json"))["lists"] == []
    assert "deleted" in run("remove", "ada@example.com")
    assert "no subscriber" in refused("show", "ada@example.com")


def test_an_import_where_every_row_is_rejected_fails_with_one_line_per_row(
    db_url: str, tmp_path: Path
) -> None:
    env = worker_env(db_url, "smtp://127.0.0.1:1?tls=none")
    path = tmp_path / "bad.csv"
    path.write_text("email,name\nnot-an-address,A\nalso@@bad.example,B\n", encoding="utf-8")
    proc = senddock(env, "subscribers", "import", str(path), "--list", "news")
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert [ln.split(": rejected:")[0] for ln in lines[:2]] == [f"{path}:2", f"{path}:3"]
    assert len(lines) == 3 and "imported nothing" in lines[2]
    empty = tmp_path / "empty.csv"
    empty.write_text("email,name\n", encoding="utf-8")
    assert senddock(env, "subscribers", "import", str(empty), "--list", "news").returncode == 0
