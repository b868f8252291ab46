"""The `senddock` command's contract, driven through the real command line.

Every success says what it did and exits 0; every failure a person can cause is ONE line on
stderr, a non-zero exit, and never a traceback. Rows are checked in the database, mail at the
SMTP server.
"""

from __future__ import annotations

import json
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from senddock.campaigns import broadcast, create_campaign
from senddock.campaigns.broadcast import enqueue_all
from senddock.db.migrate import available
from senddock.testing import Catcher
from support import (
    Conn,
    ThreadWorker,
    seed_list,
    senddock,
    start_worker,
    unfinished,
    wait_until,
    worker_env,
)

# Nothing listens here: for commands that never talk SMTP.
NO_SMTP = "smtp://127.0.0.1:9?tls=none"
UNREACHABLE_DB = "postgresql://postgres@127.0.0.1:1/x"
FROM = "News <news@example.org>"
COUNT_KEYS = ("total", "pending", "sending", "retry", "sent", "failed", "bounced")


# -- helpers -------------------------------------------------------------------------------


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """Assert a command succeeded; return it."""
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def one_line_error(proc: subprocess.CompletedProcess[str], *mentions: str) -> str:
    """Assert the contract for a failure: non-zero exit, one stderr line, no traceback."""
    err = proc.stderr
    assert proc.returncode != 0, f"expected a failure, got exit 0\nstdout: {proc.stdout}"
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected ONE line on stderr, got {len(lines)}:\n{err}"
    for word in mentions:
        assert word.lower() in lines[0].lower(), f"{word!r} not in {lines[0]!r}"
    return lines[0]


REJECTED = re.compile(r":(\d+)(?:-\d+)?: rejected: (.*)$")


def rejected_by_line(stderr: str) -> dict[int, str]:
    """{line the bad row starts on: reason} from an import's stderr."""
    found: dict[int, str] = {}
    for line in stderr.splitlines():
        m = REJECTED.search(line)
        if m:
            found[int(m.group(1))] = m.group(2)
    return found


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def count(conn: Conn, sql: str, *params: object) -> int:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return int(next(iter(row.values())))


def members(conn: Conn, list_name: str) -> dict[str, str]:
    """{lower(email): name} of the subscribers on `list_name`."""
    rows = conn.execute(
        "SELECT lower(s.email) AS e, s.name FROM list_memberships m"
        " JOIN lists l ON l.id = m.list_id JOIN subscribers s ON s.id = m.subscriber_id"
        " WHERE l.name = %s",
        (list_name,),
    ).fetchall()
    return {str(r["e"]): str(r["name"]) for r in rows}


def campaign_create(
    env: dict[str, str],
    text_file: Path,
    *extra: str,
    name: str = "N",
    list_name: str = "news",
    subject: str = "S",
    from_addr: str = FROM,
) -> subprocess.CompletedProcess[str]:
    """`senddock campaign create` with these fields; its outcome is the caller's to check."""
    fields = ["--name", name, "--list", list_name, "--subject", subject, "--from", from_addr]
    return senddock(env, "campaign", "create", *fields, "--text-file", str(text_file), *extra)


def create_via_cli(env: dict[str, str], tmp_path: Path, list_name: str, **kw: str) -> int:
    text = write(tmp_path / "body.txt", kw.pop("text", "Hi {{ subscriber.name }}\n"))
    proc = ok(
        campaign_create(
            env,
            text,
            name=kw.pop("name", "Spring news"),
            list_name=list_name,
            subject=kw.pop("subject", "Hello {{ subscriber.name }}"),
            from_addr=kw.pop("from_addr", FROM),
        )
    )
    assert proc.stdout.strip().isdigit(), f"create must print the id alone: {proc.stdout!r}"
    return int(proc.stdout.strip())


def _with_db(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


@pytest.fixture
def env(db_url: str) -> dict[str, str]:
    return worker_env(db_url, NO_SMTP)


@pytest.fixture
def fresh_db(pg_server: str) -> Iterator[str]:
    """A brand-new, empty database (no schema) on the test server."""
    name = f"senddock_cli_{secrets.token_hex(4)}"
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_db(pg_server, name)
    finally:
        with psycopg.connect(pg_server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- the command set -----------------------------------------------------------------------


def test_help_lists_every_command_of_the_contract(env: dict[str, str]) -> None:
    top = ok(senddock(env, "--help")).stdout
    for command in ("migrate", "subscribers", "campaign", "worker", "demo"):
        assert re.search(rf"^\s+{command}\b", top, re.M), f"{command} missing from --help"
    sub = ok(senddock(env, "subscribers", "--help")).stdout
    assert re.search(r"^\s+import\b", sub, re.M)
    camp = ok(senddock(env, "campaign", "--help")).stdout
    for command in ("create", "send", "status", "resume"):
        assert re.search(rf"^\s+{command}\b", camp, re.M), f"campaign {command} missing"


# -- migrate -------------------------------------------------------------------------------


def test_a_fresh_database_tells_to_run_migrate_then_migrate_is_idempotent(
    fresh_db: str, tmp_path: Path
) -> None:
    env = worker_env(fresh_db, "smtp://127.0.0.1:25?tls=none")
    csv_file = write(tmp_path / "a.csv", "email,name\na@example.com,A\n")
    for args in (
        ("campaign", "status", "1"),
        ("campaign", "send", "1"),
        ("subscribers", "import", str(csv_file), "--list", "news"),
        ("worker",),
    ):
        one_line_error(senddock(env, *args, timeout=30), "senddock migrate")

    # Two migrators at once: both succeed, each migration is applied exactly once.
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "senddock", "migrate"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert "Traceback" not in err
    applied_now: list[str] = []
    for out, _ in outs:
        said = out.strip()
        assert said == "schema is current" or said.startswith("applied "), said
        if said.startswith("applied "):
            applied_now += said.removeprefix("applied ").split(", ")
    assert sorted(applied_now) == [name for _, name, _ in available()], outs

    again = ok(senddock(env, "migrate"))
    assert again.stdout.strip() == "schema is current"
    with psycopg.connect(fresh_db) as c:
        row = c.execute(
            "SELECT count(*), count(DISTINCT version) FROM schema_migrations"
        ).fetchone()
        assert row is not None and row[0] == row[1] >= 1
    # And the schema now works for the commands that refused before.
    ok(senddock(env, "subscribers", "import", str(csv_file), "--list", "news"))


def test_migrate_while_a_worker_runs_leaves_it_working(
    db_url: str, conn: Conn, catcher: Catcher, tmp_path: Path
) -> None:
    env = worker_env(db_url, catcher.url)
    worker = start_worker(env, concurrency=2, log=tmp_path / "worker.log")
    try:
        assert wait_until(lambda: count(conn, "SELECT count(*) FROM workers") == 1, 30), (
            tmp_path / "worker.log"
        ).read_text()
        assert ok(senddock(env, "migrate")).stdout.strip() == "schema is current"

        emails = [f"after-migrate{i}@example.com" for i in range(20)]
        csv_file = write(tmp_path / "l.csv", "email,name\n" + "".join(f"{e},N\n" for e in emails))
        ok(senddock(env, "subscribers", "import", str(csv_file), "--list", "news"))
        cid = create_via_cli(env, tmp_path, "news")
        ok(senddock(env, "campaign", "send", str(cid)))
        assert catcher.wait_for(len(emails), timeout=30), catcher.received_count
        assert catcher.delivered_once(emails)
        assert worker.poll() is None, "the worker died"
    finally:
        worker.send_signal(signal.SIGTERM)
        rc = worker.wait(30)
    assert rc == 0, (tmp_path / "worker.log").read_text()


# -- subscribers import --------------------------------------------------------------------


def test_import_reports_bad_rows_by_line_and_imports_the_rest(
    env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    csv_file = write(
        tmp_path / "people.csv",
        "email,name\n"  # 1
        "ada@example.com,Ada\n"  # 2
        "not-an-address,Bad\n"  # 3
        ",Nobody\n"  # 4
        "extra@example.com,Extra,field\n"  # 5
        'crlf@example.com,"Two\r\nLines"\n'  # 6-7: a line break inside a quoted name: joined
        "grace@example.com,Grace\n"  # 8
        "ADA@Example.COM,Ada L.\n"  # 9: the same person as line 2
        "   \t  ,Blank\n",  # 10
    )
    proc = ok(senddock(env, "subscribers", "import", str(csv_file), "--list", "news"))
    bad = rejected_by_line(proc.stderr)
    assert sorted(bad) == [3, 4, 5, 10], proc.stderr
    assert "not-an-address" in bad[3]
    assert members(conn, "news") == {
        "ada@example.com": "Ada L.",
        "grace@example.com": "Grace",
        "crlf@example.com": "Two Lines",
    }
    assert count(conn, "SELECT count(*) FROM subscribers") == 3
    assert proc.stdout.strip().endswith(
        "10 lines: 1 header + 4 imported + 4 rejected + 1 inside quoted fields"
    ), proc.stdout


@pytest.mark.parametrize("brk", ["\r\n", "\n", "\r"])
def test_a_line_break_in_a_quoted_name_is_joined_and_lines_after_it_keep_their_numbers(
    brk: str, env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    csv_file = write(
        tmp_path / "breaks.csv",
        "email,name\n"  # 1
        "ada@example.com,Ada\n"  # 2
        f'crlf@example.com,"Two{brk}Lines"\n'  # 3-4
        "\n"  # 5: a blank line is skipped, not a row
        "bad@,X\n",  # 6
    )
    proc = ok(senddock(env, "subscribers", "import", str(csv_file), "--list", "news"))
    assert sorted(rejected_by_line(proc.stderr)) == [6], proc.stderr
    assert members(conn, "news") == {"ada@example.com": "Ada", "crlf@example.com": "Two Lines"}
    assert proc.stdout.strip().endswith(
        "6 lines: 1 header + 2 imported + 1 rejected + 1 blank + 1 inside quoted fields"
    ), proc.stdout


def test_reimport_updates_rather_than_duplicates_and_ignores_case(
    env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    first = write(tmp_path / "a.csv", "email,name\nada@example.com,Ada\nbob@example.com,Bob\n")
    ok(senddock(env, "subscribers", "import", str(first), "--list", "news"))
    ok(senddock(env, "subscribers", "import", str(first), "--list", "news"))
    assert count(conn, "SELECT count(*) FROM subscribers") == 2
    assert count(conn, "SELECT count(*) FROM list_memberships") == 2

    second = write(tmp_path / "b.csv", "email,name\nAda@EXAMPLE.com,Ada Lovelace\n")
    ok(senddock(env, "subscribers", "import", str(second), "--list", "news"))
    ok(senddock(env, "subscribers", "import", str(second), "--list", "other"))
    assert count(conn, "SELECT count(*) FROM subscribers") == 2
    assert members(conn, "news") == {"ada@example.com": "Ada Lovelace", "bob@example.com": "Bob"}
    assert members(conn, "other") == {"ada@example.com": "Ada Lovelace"}
    assert count(conn, "SELECT count(*) FROM list_memberships") == 3


def test_import_rejects_a_row_with_a_nul_byte_by_line(
    env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    # Valid UTF-8, so the file is readable; Postgres text cannot hold NUL, so the row is bad.
    csv_file = write(
        tmp_path / "nul.csv",
        "email,name\nada@example.com,Ada\nnul@example.com,Bad\x00Name\ngrace@example.com,Grace\n",
    )
    proc = senddock(env, "subscribers", "import", str(csv_file), "--list", "news")
    ok(proc)
    assert sorted(rejected_by_line(proc.stderr)) == [3], proc.stderr
    assert sorted(members(conn, "news")) == ["ada@example.com", "grace@example.com"]


@pytest.mark.parametrize("kind", ["missing", "directory", "binary", "no-email-column", "empty"])
def test_an_unreadable_csv_is_one_line_and_imports_nothing(
    kind: str, env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    path = tmp_path / f"{kind}.csv"
    if kind == "directory":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe\xc3\x28" * 20)
    elif kind == "no-email-column":
        write(path, "name,address\nAda,ada@example.com\n")
    elif kind == "empty":
        path.write_bytes(b"")
    proc = senddock(env, "subscribers", "import", str(path), "--list", "news")
    one_line_error(proc, path.name)
    assert count(conn, "SELECT count(*) FROM subscribers") == 0


# -- campaign create -----------------------------------------------------------------------


def test_create_prints_the_new_id_alone(env: dict[str, str], conn: Conn, tmp_path: Path) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    text = write(tmp_path / "t.txt", "Hi {{ subscriber.name }}\n")
    html = write(tmp_path / "h.html", "<p>Hi {{ subscriber.name }}</p>\n")
    ids = []
    for extra in ((), ("--html-file", str(html))):
        proc = ok(campaign_create(env, text, *extra))
        assert proc.stdout.strip().isdigit(), repr(proc.stdout)
        assert len(proc.stdout.strip().splitlines()) == 1
        ids.append(int(proc.stdout))
    rows = conn.execute("SELECT id, status, html_body FROM campaigns ORDER BY id").fetchall()
    assert [r["id"] for r in rows] == ids
    assert [r["status"] for r in rows] == ["draft", "draft"]
    assert rows[0]["html_body"] is None and "<p>" in str(rows[1]["html_body"])


@pytest.mark.parametrize("part", ["text", "html", "subject"])
def test_a_template_syntax_error_fails_at_create_naming_the_line(
    part: str, env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    good = write(tmp_path / "good.txt", "Hi {{ subscriber.name }}\n")
    broken = write(tmp_path / "broken.txt", "Hello,\n\nHi {{ subscriber.name \n")
    args = ["--name", "N", "--list", "news", "--from", FROM]
    if part == "text":
        args += ["--subject", "S", "--text-file", str(broken)]
        line = "line 3"
    elif part == "html":
        args += ["--subject", "S", "--text-file", str(good), "--html-file", str(broken)]
        line = "line 3"
    else:
        args += ["--subject", "Hi {{ subscriber.name ", "--text-file", str(good)]
        line = "line 1"
    message = one_line_error(senddock(env, "campaign", "create", *args), line)
    assert part in message.lower()
    assert count(conn, "SELECT count(*) FROM campaigns") == 0


@pytest.mark.parametrize(
    ("subject", "from_addr", "mention"),
    [
        ("Hello\r\nBcc: victim@example.com", FROM, "subject"),
        ("Hello\nthere", FROM, "subject"),
        ("Hello", "not an address", "not an address"),
        ("Hello", "News <news@@example.org>", "from"),
        ("Hello", "News <news@example.org>\r\nBcc: victim@example.com", "from"),
        ("Hello", "", "from"),
    ],
)
def test_create_refuses_header_injection_and_bad_from(
    subject: str, from_addr: str, mention: str, env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    text = write(tmp_path / "t.txt", "Hi\n")
    proc = campaign_create(env, text, subject=subject, from_addr=from_addr)
    one_line_error(proc, mention)
    assert count(conn, "SELECT count(*) FROM campaigns") == 0


# -- campaign send -------------------------------------------------------------------------


def test_send_enqueues_and_returns_at_once_and_a_second_send_creates_nothing(
    env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    emails = [f"user{i}@example.com" for i in range(25)]
    seed_list(conn, "news", emails)
    cid = create_via_cli(env, tmp_path, "news")

    first = ok(senddock(env, "campaign", "send", str(cid)))  # no worker runs: nothing waits
    assert "25" in first.stdout
    c = conn.execute("SELECT status, broadcast_id FROM campaigns WHERE id = %s", (cid,)).fetchone()
    assert c is not None and c["status"] == "sending" and c["broadcast_id"] is not None
    bid = int(c["broadcast_id"])
    jobs_sql = "SELECT count(*) FROM broadcast_jobs WHERE broadcast_id = %s AND status = 'pending'"
    assert count(conn, jobs_sql, bid) == 25
    assert str(bid) in first.stdout

    seed_list(conn, "news", ["late@example.com"])  # joins after the send: not in this broadcast
    second = ok(senddock(env, "campaign", "send", str(cid)))
    assert "already" in second.stdout.lower(), second.stdout
    assert str(bid) in second.stdout
    assert count(conn, "SELECT count(*) FROM broadcast_jobs") == 25
    assert count(conn, "SELECT count(*) FROM broadcasts") == 1
    c2 = conn.execute("SELECT broadcast_id FROM campaigns WHERE id = %s", (cid,)).fetchone()
    assert c2 is not None and c2["broadcast_id"] == bid


def _seed_series(conn: Conn, list_name: str, first: int, n: int) -> None:
    """Subscribe addresses u<first>..u<first+n-1>@example.com to a new list, set-based."""
    with conn.transaction():
        conn.execute("INSERT INTO lists (name) VALUES (%s)", (list_name,))
        conn.execute(
            "INSERT INTO subscribers (email, name)"
            " SELECT 'u' || g || '@example.com', 'User ' || g"
            " FROM generate_series(%s::int, %s::int) AS g",
            (first, first + n - 1),
        )
        conn.execute(
            "INSERT INTO list_memberships (list_id, subscriber_id)"
            " SELECT l.id, s.id FROM lists l, subscribers s"
            " WHERE l.name = %s AND s.id BETWEEN"
            "  (SELECT min(id) FROM subscribers WHERE email = 'u' || %s::int || '@example.com')"
            "  AND (SELECT max(id) FROM subscribers)",
            (list_name, first),
        )


def test_send_enqueues_ten_thousand_and_prints_broadcast_timings(
    env: dict[str, str], conn: Conn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _seed_series(conn, "ten-k", 1, 10_000)
    cid = create_via_cli(env, tmp_path, "ten-k")
    t0 = time.perf_counter()
    proc = ok(senddock(env, "campaign", "send", str(cid), timeout=120))
    cli_seconds = time.perf_counter() - t0
    assert "started" in proc.stdout, proc.stdout
    enqueue_all(conn)  # what workers do in the background (tests/test_enqueue_background.py)
    assert count(conn, "SELECT count(*) FROM broadcast_jobs WHERE status = 'pending'") == 10_000

    # The enqueue itself, in process, for 10,000 and 100,000 recipients (printed, not asserted).
    _seed_series(conn, "hundred-k", 10_001, 100_000)
    timings = []
    for list_name, n in (("ten-k", 10_000), ("hundred-k", 100_000)):
        c = create_campaign(
            conn,
            name=f"bench {n}",
            list_name=list_name,
            subject="S",
            from_addr=FROM,
            text_body="Hi {{ subscriber.name }}\n",
        )
        t0 = time.perf_counter()
        bid, total, created = broadcast(conn, c)
        total += enqueue_all(conn, bid)
        timings.append((n, time.perf_counter() - t0))
        assert (total, created) == (n, True)
    with capsys.disabled():
        print(f"\n  senddock campaign send (10,000, whole CLI process): {cli_seconds:.2f} s")
        for n, seconds in timings:
            print(
                f"  senddock.campaigns.broadcast({n:,} recipients): {seconds:.2f} s"
                f" ({n / seconds:,.0f} jobs/s)"
            )


# -- campaign status -----------------------------------------------------------------------


def test_status_json_gives_exact_integer_counts_and_the_human_form_agrees(
    db_url: str, conn: Conn, catcher: Catcher, tmp_path: Path
) -> None:
    env = worker_env(db_url, catcher.url)
    emails = ["ada@example.com", "bob@example.com", "cy@example.com", "bounce-dan@example.com"]
    seed_list(conn, "news", emails)
    cid = create_via_cli(env, tmp_path, "news")

    draft = json.loads(ok(senddock(env, "campaign", "status", str(cid), "--json")).stdout)
    assert draft["status"] == "draft"
    assert all(draft[k] == 0 for k in COUNT_KEYS)

    ok(senddock(env, "campaign", "send", str(cid)))
    queued = json.loads(ok(senddock(env, "campaign", "status", str(cid), "--json")).stdout)
    assert queued["status"] == "sending"
    assert (queued["total"], queued["pending"], queued["sent"]) == (4, 4, 0)

    bid = count(conn, "SELECT broadcast_id FROM campaigns WHERE id = %s", cid)
    with ThreadWorker(db_url, catcher.url):
        assert wait_until(lambda: unfinished(conn, bid) == 0, 30)
    st = json.loads(ok(senddock(env, "campaign", "status", str(cid), "--json")).stdout)
    assert set(COUNT_KEYS) | {"status"} <= set(st), st
    for key in COUNT_KEYS:
        assert type(st[key]) is int, (key, st[key])
    got = {k: st[k] for k in ("status", *COUNT_KEYS)}
    assert got == {
        "status": "sent",
        "total": 4,
        "pending": 0,
        "sending": 0,
        "retry": 0,
        "sent": 3,
        "failed": 1,
        "bounced": 1,
    }
    assert sorted(catcher.count_by_rcpt()) == sorted(emails[:3])

    human = ok(senddock(env, "campaign", "status", str(cid))).stdout
    assert "sent" in human
    for key, value in (("total", 4), ("sent", 3), ("failed", 1), ("bounced", 1)):
        assert re.search(rf"\b{key}\s+{value}\b", human), (key, human)


# -- resume and unknown ids ----------------------------------------------------------------


def test_resume_of_a_campaign_that_is_not_paused_is_a_one_line_error(
    env: dict[str, str], conn: Conn, tmp_path: Path
) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    cid = create_via_cli(env, tmp_path, "news")
    one_line_error(senddock(env, "campaign", "resume", str(cid)), str(cid))  # a draft
    ok(senddock(env, "campaign", "send", str(cid)))
    one_line_error(senddock(env, "campaign", "resume", str(cid)), str(cid))  # sending
    row = conn.execute("SELECT status FROM campaigns WHERE id = %s", (cid,)).fetchone()
    assert row is not None and row["status"] == "sending"


@pytest.mark.parametrize("command", ["status", "send", "resume", "pause"])
def test_an_unknown_campaign_id_is_a_one_line_error(
    command: str, env: dict[str, str], conn: Conn
) -> None:
    one_line_error(senddock(env, "campaign", command, "4242"), "4242")
    assert count(conn, "SELECT count(*) FROM broadcasts") == 0


# -- environment errors --------------------------------------------------------------------


def test_an_unreachable_database_is_a_one_line_error(tmp_path: Path) -> None:
    env = worker_env(UNREACHABLE_DB, NO_SMTP)
    csv_file = write(tmp_path / "a.csv", "email,name\na@example.com,A\n")
    text = write(tmp_path / "t.txt", "Hi\n")
    create: tuple[str, ...] = ("campaign", "create", "--name", "N", "--list", "news")
    create += ("--subject", "S", "--from", FROM, "--text-file", str(text))
    for args in (
        ("migrate",),
        ("campaign", "status", "1"),
        ("campaign", "send", "1"),
        ("campaign", "resume", "1"),
        ("subscribers", "import", str(csv_file), "--list", "news"),
        create,
        ("worker",),
    ):
        one_line_error(senddock(env, *args, timeout=30), "database")


@pytest.mark.parametrize(
    "smtp_url", ["http://x", "smtp://127.0.0.1:25?tls=bogus", "ftp://relay.example.org"]
)
def test_worker_refuses_a_bad_smtp_url_in_one_line(smtp_url: str, db_url: str) -> None:
    proc = senddock(worker_env(db_url, smtp_url), "worker", timeout=30)
    one_line_error(proc)


# -- worker lifecycle ----------------------------------------------------------------------


def test_worker_exits_0_on_sigterm_leaving_nothing_in_flight(
    db_url: str, conn: Conn, catcher: Catcher, tmp_path: Path
) -> None:
    emails = [f"reader{i}@example.com" for i in range(1000)]
    seed_list(conn, "news", emails)
    cid = create_campaign(
        conn, name="c", list_name="news", subject="S", from_addr=FROM, text_body="Hi\n"
    )
    bid, _, _ = broadcast(conn, cid)
    log = tmp_path / "worker.log"
    worker = start_worker(worker_env(db_url, catcher.url), concurrency=3, log=log)
    try:
        assert catcher.wait_for(30, timeout=30), log.read_text()
    finally:
        worker.send_signal(signal.SIGTERM)
        rc = worker.wait(30)
    assert rc == 0, log.read_text()
    assert "Traceback" not in log.read_text()
    # Graceful: what was in flight was finished and recorded; nothing is left held.
    assert count(conn, "SELECT count(*) FROM broadcast_jobs WHERE status = 'sending'") == 0
    sent = {
        str(r["email"])
        for r in conn.execute(
            "SELECT email FROM broadcast_jobs WHERE broadcast_id = %s AND status = 'sent'", (bid,)
        ).fetchall()
    }
    assert sent == set(catcher.count_by_rcpt())
    assert count(conn, "SELECT count(*) FROM workers") == 0
