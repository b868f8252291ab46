"""A first day with `senddock`: what it says at start, -v, --help, --version, SIGTERM on the
embedded database, tokens and admins, counts in words, and imports that say what happened.

Real processes against the test database (or an embedded Postgres of the test's own).
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import click
import httpx
import pytest

import forkserver
from senddock.cli import cli
from senddock.db.embedded import pg_ctl
from senddock.redaction import hide_password
from senddock.web import auth
from support import Conn, senddock, wait_until, worker_env
from web_support import free_port

NO_SMTP = "smtp://127.0.0.1:9?tls=none"
HANDLE_FILE = ".handle_pids.json"  # pgserver's list of the processes using a server


def one_line_error(proc: subprocess.CompletedProcess[str], *mentions: str) -> str:
    assert proc.returncode != 0, f"expected a failure, got exit 0\nstdout: {proc.stdout}"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for word in mentions:
        assert word.lower() in lines[0].lower(), f"{word!r} not in {lines[0]!r}"
    return lines[0]


def env_without(env: dict[str, str], *names: str) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in names}


def startup_block(stderr: str) -> str:
    start = stderr.index("starting")
    return stderr[start:]


# -- 1. what worker and serve say at start -------------------------------------------------


def test_worker_says_its_relays_limits_senders_database_and_public_url_never_a_password(
    db_url: str,
) -> None:
    smtp = "smtp://ada:s3cret-smtp@127.0.0.1:9?tls=none&per_second=7&per_hour=900"
    url = db_url + ("&" if "?" in db_url else "?") + "password=s3cret-db"
    env = env_without(worker_env(url, smtp), "SENDDOCK_PUBLIC_URL")
    proc = subprocess.Popen(
        [sys.executable, "-m", "senddock", "worker", "--processes", "1", "--concurrency", "3"],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    lines: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert wait_until(lambda: "SENDDOCK_PUBLIC_URL" in "".join(lines), timeout=30), lines
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        reader.join(10)
    said = "".join(lines)
    assert "s3cret" not in said, said
    assert "senddock worker: starting" in said
    assert re.search(r"relay\s+smtp://ada@127\.0\.0\.1:9 tls=none, at most 7/s 900/h", said), said
    assert "(password hidden)" in said
    assert "3 SMTP sessions in each of 1 process" in said
    assert re.search(r"database\s+postgresql://.*password=\*\*\*", said), said
    assert "public URL  http://127.0.0.1:8025" in said
    assert "SENDDOCK_PUBLIC_URL is not set" in said
    assert "SENDDOCK_SMTP_URL is not set" not in said


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://u:p%40ss@db:5432/x?sslmode=require",
            "postgresql://u:***@db:5432/x?sslmode=require",
        ),
        ("postgresql://u@db/x", "postgresql://u@db/x"),
        (
            "postgresql:///x?host=/tmp/s&password=pw&user=u",
            "postgresql:///x?host=/tmp/s&password=***&user=u",
        ),
        ("postgresql://u:p@ss@h1,h2/x", "postgresql://u:***@h1,h2/x"),
        ("host=db password='a b' user=u", "host=db password=*** user=u"),
        ("host=db password=pw", "host=db password=***"),
    ],
)
def test_a_database_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert hide_password(url) == shown


# -- 3. SIGTERM stops the embedded Postgres; dead handles are forgotten ---------------------


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data dir for an embedded Postgres of this test's own; its server stopped at the end."""
    base = Path(tempfile.mkdtemp(prefix="sdfd"))  # short: unix socket paths are limited
    try:
        yield base
    finally:
        if (base / "pgdata" / "postmaster.pid").exists():
            pg_ctl(base / "pgdata", "stop", "-m", "immediate")
        shutil.rmtree(base, ignore_errors=True)


def embedded_env(data_dir: Path) -> dict[str, str]:
    env = worker_env("", NO_SMTP, SENDDOCK_DATA_DIR=str(data_dir))
    return env_without(env, "SENDDOCK_DATABASE_URL", "SENDDOCK_SMTP_URL", "SENDDOCK_PUBLIC_URL")


def postmaster_running(data_dir: Path) -> bool:
    found = subprocess.run(
        ["pgrep", "-f", f"postgres -D {data_dir}/pgdata"], capture_output=True, text=True
    )
    return bool(found.stdout.strip())


def handles(data_dir: Path) -> list[int]:
    path = data_dir / "pgdata" / HANDLE_FILE
    return list(json.loads(path.read_text() or "[]")) if path.exists() else []


def test_serve_stopped_by_sigterm_stops_its_embedded_postgres_and_forgets_its_pid(
    data_dir: Path,
) -> None:
    env = embedded_env(data_dir)
    migrated = senddock(env, "migrate", timeout=120)
    assert migrated.returncode == 0, migrated.stderr
    assert not postmaster_running(data_dir), "migrate left its Postgres running"
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "senddock", "serve", "--no-workers", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def up() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return proc.poll() is not None

        assert wait_until(up, timeout=60) and proc.poll() is None
        assert postmaster_running(data_dir)
        assert handles(data_dir) == [proc.pid]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    block = startup_block(err)
    assert f"embedded Postgres in {data_dir}/pgdata" in block
    assert "relay       smtp://127.0.0.1:25 tls=none" in block  # the defaults, each warned of
    assert "SENDDOCK_SMTP_URL is not set" in block
    assert "SENDDOCK_PUBLIC_URL is not set" in block
    assert not postmaster_running(data_dir), "SIGTERM left the embedded Postgres running"
    assert proc.pid not in handles(data_dir)


def test_a_dead_process_left_in_the_handle_file_does_not_keep_postgres_running(
    data_dir: Path,
) -> None:
    env = embedded_env(data_dir)
    assert senddock(env, "migrate", timeout=120).returncode == 0
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid nobody has now: a process SIGKILLed before its cleanup ran
    (data_dir / "pgdata" / HANDLE_FILE).write_text(json.dumps([dead.pid]))
    done = senddock(env, "subscribers", "add", "ada@example.org", timeout=120)
    assert done.returncode == 0, done.stderr
    assert not postmaster_running(data_dir), "a stale handle kept the embedded Postgres running"
    assert handles(data_dir) == []


# -- 2. -v shows tracebacks ---------------------------------------------------------------


def test_verbose_shows_the_traceback_behind_a_one_line_error(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    env = env_without(
        worker_env("", NO_SMTP, SENDDOCK_DATA_DIR=str(not_a_dir)), "SENDDOCK_DATABASE_URL"
    )
    quiet = senddock(env, "migrate")
    one_line_error(quiet, "embedded database")
    loud = senddock(env, "-v", "migrate")
    assert loud.returncode != 0
    assert "Traceback (most recent call last)" in loud.stderr, loud.stderr
    assert loud.stderr.strip().splitlines()[-1] == quiet.stderr.strip()


# -- 4. --version, help for every option, settings in --help -------------------------------


def test_version_prints_the_installed_version() -> None:
    done = senddock(worker_env("", NO_SMTP), "--version")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"senddock, version \d+\.\d+\.\d+\S*\n", done.stdout), done.stdout


def test_every_option_of_every_command_has_help() -> None:
    missing: list[str] = []

    def walk(command: click.Command, path: str) -> None:
        for param in command.params:
            if isinstance(param, click.Option) and not param.help:
                missing.append(f"{path} {'/'.join(param.opts)}")
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, f"{path} {name}")

    walk(cli, "senddock")
    assert missing == []


@pytest.mark.parametrize(
    ("command", "settings"),
    [
        (("worker",), ("SMTP_URL", "DATABASE_URL", "RETRY_SCHEDULE", "PUBLIC_URL")),
        (("serve",), ("SMTP_URL", "DATABASE_URL", "PUBLIC_URL", "SESSION_SECRET")),
        (("demo",), ("SMTP_URL", "DATABASE_URL")),
        (("campaign", "send"), ("DATABASE_URL", "DATA_DIR")),
        (("subscribers", "import"), ("DATABASE_URL", "DATA_DIR")),
    ],
)
def test_help_names_the_settings_a_command_reads(
    command: tuple[str, ...], settings: tuple[str, ...]
) -> None:
    done = senddock(worker_env("", NO_SMTP), *command, "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    for name in settings:
        assert f"SENDDOCK_{name}" in text, (name, done.stdout)


# -- 5. tokens and admins -------------------------------------------------------------------


def test_token_list_never_shows_a_token_and_revoke_refuses_it_at_once(
    conn: Conn, db_url: str
) -> None:
    env = worker_env(db_url, NO_SMTP)
    token = senddock(env, "token", "create", "--name", "ci").stdout.strip()
    other = senddock(env, "token", "create").stdout.strip()
    listed = senddock(env, "token", "list")
    assert listed.returncode == 0, listed.stderr
    assert token not in listed.stdout and other not in listed.stdout
    assert token.removeprefix("sdk_")[:8] not in listed.stdout
    lines = listed.stdout.strip().splitlines()
    assert len(lines) == 2 and "ci" in lines[0] and "last used never" in lines[0]
    ids = [int(line.split()[1]) for line in lines]
    done = senddock(env, "token", "revoke", str(ids[0]))
    assert done.returncode == 0 and f"token {ids[0]} revoked" in done.stdout, done.stderr
    assert not auth.token_ok(conn, token)
    assert auth.token_ok(conn, other)
    one_line_error(senddock(env, "token", "revoke", str(ids[0])), f"no API token {ids[0]}")


def admin(env: dict[str, str], *args: str, password: str = "") -> subprocess.CompletedProcess[str]:
    """`senddock admin ARGS`, the password on stdin (forked: tests/forkserver.py)."""
    return forkserver.run(["admin", *args], env, input=password + "\n")


def test_admin_list_remove_and_password_change_who_can_log_in(conn: Conn, db_url: str) -> None:
    env = worker_env(db_url, NO_SMTP)
    assert (
        admin(env, "create", "--email", "ada@example.org", password="first-password").returncode
        == 0
    )
    assert (
        admin(env, "create", "--email", "bob@example.org", password="bobs-password").returncode == 0
    )
    listed = admin(env, "list")
    assert listed.returncode == 0, listed.stderr
    assert "ada@example.org" in listed.stdout and "bob@example.org" in listed.stdout
    assert "argon2" not in listed.stdout

    for empty in ("", "   ", "\t "):
        refused = admin(env, "password", "ada@example.org", password=empty)
        one_line_error(refused, "empty")
    one_line_error(admin(env, "create", "--email", "c@example.org", password="    "), "empty")
    changed = admin(env, "password", "ADA@example.org", password="second-password")
    assert changed.returncode == 0, changed.stderr
    assert auth.authenticate_admin(conn, "ada@example.org", "second-password") is not None
    assert auth.authenticate_admin(conn, "ada@example.org", "first-password") is None
    one_line_error(admin(env, "password", "nobody@example.org", password="x" * 12), "no admin")

    removed = admin(env, "remove", "bob@example.org")
    assert removed.returncode == 0 and "removed" in removed.stdout, removed.stderr
    assert auth.authenticate_admin(conn, "bob@example.org", "bobs-password") is None
    assert "bob@example.org" not in admin(env, "list").stdout
    one_line_error(admin(env, "remove", "bob@example.org"), "no admin")


# -- 6, 7, 8. counts in words, suppressed shown, imports that say what happened -------------


def test_one_row_is_a_row_and_one_member_a_member(db_url: str, tmp_path: Path) -> None:
    env = worker_env(db_url, NO_SMTP)
    one = tmp_path / "one.csv"
    one.write_text("email\nada@example.org\n")
    done = senddock(env, "subscribers", "import", str(one), "--list", "news")
    assert done.stdout.strip() == (
        "imported 1 row into 'news': 1 subscriber (1 new); rejected 0 rows;"
        " 2 lines: 1 header + 1 imported + 0 rejected"
    )
    out = tmp_path / "out.csv"
    exported = senddock(env, "subscribers", "export", "--list", "news", "-o", str(out))
    assert exported.stdout.strip() == f"exported 1 member of 'news' to {out}"
    supp = tmp_path / "supp.csv"
    supp.write_text("email\nbob@example.org\n")
    added = senddock(env, "suppressions", "import", str(supp))
    assert added.stdout.strip() == "suppressed 1 address; 0 already were; rejected 0 rows"
    bad = tmp_path / "bad.csv"
    bad.write_text("email\nnot-an-address\n")
    nothing = senddock(env, "subscribers", "import", str(bad), "--list", "news")
    assert nothing.returncode != 0
    # One line, saying which row and why.
    [line] = nothing.stderr.strip().splitlines()
    assert line.startswith(
        f"senddock: error: imported nothing from {bad}: the only row was rejected"
    ), line
    assert "line 2:" in line, line


def test_show_says_a_suppressed_subscriber_is_suppressed_and_why(db_url: str) -> None:
    env = worker_env(db_url, NO_SMTP)
    assert senddock(env, "subscribers", "add", "ada@example.org", "--list", "news").returncode == 0
    assert senddock(env, "suppressions", "add", "ada@example.org").returncode == 0
    shown = senddock(env, "subscribers", "show", "ada@example.org")
    assert shown.returncode == 0, shown.stderr
    first = shown.stdout.splitlines()[0]
    assert "suppressed (manual)" in first and "active" not in first, shown.stdout


def test_import_counts_subscribers_apart_from_rows_merged_by_case(
    conn: Conn, db_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "list.csv"
    rows = [f"user{i}@example.org" for i in range(991)] + ["USER7@Example.org"]
    path.write_text("email\n" + "\n".join(rows) + "\n")
    done = senddock(worker_env(db_url, NO_SMTP), "subscribers", "import", str(path), "--list", "n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "imported 992 rows into 'n': 991 subscribers (991 new), 1 duplicate row merged;"
        " rejected 0 rows; 993 lines: 1 header + 992 imported + 0 rejected"
    )
    counted = conn.execute("SELECT count(*) AS n FROM subscribers").fetchone()
    assert counted == {"n": 991}


def test_a_semicolon_delimited_csv_is_read_by_its_header(
    db_url: str, conn: Conn, tmp_path: Path
) -> None:
    path = tmp_path / "excel.csv"
    path.write_text("Email;Name\nada@example.org;Ada, Countess\n")
    done = senddock(worker_env(db_url, NO_SMTP), "subscribers", "import", str(path), "--list", "n")
    assert done.returncode == 0, done.stderr
    row = conn.execute("SELECT email, name FROM subscribers").fetchone()
    assert row == {"email": "ada@example.org", "name": "Ada, Countess"}
    plain = tmp_path / "plain.csv"
    plain.write_text("name\nAda\n")
    line = one_line_error(
        senddock(worker_env(db_url, NO_SMTP), "subscribers", "import", str(plain), "--list", "n")
    )
    assert line.endswith("the header row has no 'email' column"), line


def test_a_worker_says_once_why_its_relay_cannot_be_reached_and_when_it_is_back(
    conn: Conn, db_url: str, tmp_path: Path
) -> None:
    """A relay that refuses connections is named in the log with the reason, once, however
    many messages wait for it (before: nothing at the default level)."""
    from senddock.testing import Catcher
    from support import send_campaign, start_worker, unfinished

    with Catcher() as relay:
        relay.set_down(True)
        _, bid = send_campaign(conn, "down", [f"u{i}@example.org" for i in range(30)])
        log = tmp_path / "worker.log"
        worker = start_worker(worker_env(db_url, relay.url), log=log)
        try:
            said = f"cannot reach SMTP server smtp://127.0.0.1:{relay.port}"
            assert wait_until(lambda: said in log.read_text(), 30), log.read_text()
            relay.set_down(False)
            assert wait_until(lambda: unfinished(conn, bid) == 0, 60), log.read_text()
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(30)
    text = log.read_text()
    assert text.count(said) == 1, text
    assert "refused" in text.split(said, 1)[1].splitlines()[0]
    assert re.search(rf"SMTP server smtp://127\.0\.0\.1:{relay.port} .*is reachable again", text)
