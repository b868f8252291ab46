"""Bounces processed per second through the listener and the pipe, and the listener's memory.

    .venv/bin/python bench/bounce_rate.py                          # 100,000 through the listener
    .venv/bin/python bench/bounce_rate.py --count 20000 --pipe 100 --clients 4

A real `senddock bounces serve` takes --count DSNs (Postfix's format, each to a job's signed
VERP address, each message distinct so none is a duplicate) from --clients concurrent SMTP
sessions; every 250 is a commit (parse, store, match, apply). Its RSS (/proc VmRSS) is read
after the first 10,000 and at the end: flat means no per-bounce state is kept. Then --pipe
DSNs go through `senddock bounces ingest` (one process per message, as Postfix's pipe runs
it), --clients at a time. Printed as one table; ratios within this run only.
Figures, dated, in docs/measurements.md (100,000 on 2026-12-04: 193/s, RSS flat).
Uses SENDDOCK_DATABASE_URL if set, else an embedded Postgres in a temp folder.
"""

from __future__ import annotations

import argparse
import os
import smtplib
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from senddock.bounces.verp import ReturnPath
from senddock.campaigns import broadcast, compose, create_campaign
from senddock.campaigns.broadcast import enqueue_all
from senddock.config import Settings
from senddock.db import connect, migrate
from senddock.db.embedded import given_or_embedded

ROOT = Path(__file__).resolve().parent.parent
DSN = (ROOT / "tests" / "bounces" / "postfix-unknown-user.eml").read_bytes()
DSN = DSN.replace(b"\n", b"\r\n")
DOMAIN = "bounces.example.org"
JOBS = 1000
FIRST = 10_000
SEED = """
INSERT INTO subscribers (email, name)
SELECT 'r' || g || '@bench.example', 'Reader ' || g FROM generate_series(1, %(n)s::int) g
"""
JOIN = """
INSERT INTO list_memberships (list_id, subscriber_id)
SELECT %(list)s, id FROM subscribers WHERE email LIKE '%%@bench.example'
"""
CAMPAIGN: dict[str, Any] = {
    "name": "bench",
    "list_name": "bench",
    "subject": "Hi",
    "text_body": "Hi\n",
}
CAMPAIGN["from_addr"] = "news@example.org"
JOB_ROWS = "SELECT subscriber_id, email, message_id FROM broadcast_jobs WHERE broadcast_id = %s"


def targets(url: str) -> list[tuple[str, str, str]]:
    """A broadcast of JOBS: (VERP address, address, Message-ID) of each job."""
    from senddock.audience.lists import ensure_list

    with connect(url) as conn:
        migrate(conn)
        list_id = ensure_list(conn, "bench")
        with conn.transaction():
            conn.execute(SEED, {"n": JOBS})
            conn.execute(JOIN, {"list": list_id})
        cid = create_campaign(conn, **CAMPAIGN)
        bid, _, _ = broadcast(conn, cid)
        enqueue_all(conn, bid)
        key = compose.link_key(conn, Settings(database_url=url))
        rows: list[dict[str, Any]] = conn.execute(JOB_ROWS, (bid,)).fetchall()
    path = ReturnPath.parse(DOMAIN)
    return [
        (path.address(key, bid, int(r["subscriber_id"])), str(r["email"]), str(r["message_id"]))
        for r in rows
    ]


def message(seq: int, job: tuple[str, str, str]) -> tuple[str, bytes]:
    """The seq-th DSN: about one job, unique by its own Message-ID (no duplicate digest)."""
    to, email, message_id = job
    raw = DSN.replace(b"ada@example.com", email.encode())
    raw = raw.replace(b"<b42.s7.abc@senddock.example.org>", message_id.encode())
    return to, f"Message-ID: <dsn{seq}@mx.relay.example>\r\n".encode() + raw


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def listen(
    url: str, jobs: list[tuple[str, str, str]], count: int, clients: int
) -> dict[str, float]:
    """--count DSNs through a real `bounces serve`: rate and RSS after FIRST and at the end."""
    port = 25250 + os.getpid() % 1000
    env = {**os.environ, "SENDDOCK_DATABASE_URL": url, "SENDDOCK_BOUNCE_DOMAIN": DOMAIN}
    env["PYTHONPATH"] = str(ROOT / "src")
    args = [sys.executable, "-m", "senddock", "bounces", "serve", "--port", str(port)]
    proc = subprocess.Popen(args, env=env, stderr=subprocess.DEVNULL)
    done = [0]
    lock = threading.Lock()
    marks: dict[str, float] = {}

    def client(first: int) -> None:
        with smtplib.SMTP("127.0.0.1", port, timeout=60) as smtp:
            smtp.ehlo()
            for seq in range(first, count, clients):
                to, raw = message(seq, jobs[seq % len(jobs)])
                smtp.mail("<>")
                assert smtp.rcpt(to)[0] == 250
                code, said = smtp.data(raw)
                assert code == 250, said
                with lock:
                    done[0] += 1
                    if done[0] == min(FIRST, count):
                        marks["first_s"] = time.perf_counter()
                        marks["rss_first"] = rss_kib(proc.pid)

    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                smtplib.SMTP("127.0.0.1", port, timeout=2).quit()
                break
            except OSError:
                time.sleep(0.1)
        began = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(client, range(clients)))
        ended = time.perf_counter()
        marks["rss_last"] = rss_kib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
    marks["rate"] = count / (ended - began)
    marks["rate_first"] = min(FIRST, count) / (marks["first_s"] - began)
    return marks


def pipe(url: str, jobs: list[tuple[str, str, str]], count: int, parallel: int) -> float:
    """--pipe DSNs through `bounces ingest`, one process each, `parallel` at a time: per s."""
    env = {**os.environ, "SENDDOCK_DATABASE_URL": url, "SENDDOCK_BOUNCE_DOMAIN": DOMAIN}
    env["PYTHONPATH"] = str(ROOT / "src")

    def one(seq: int) -> None:
        to, raw = message(10_000_000 + seq, jobs[seq % len(jobs)])
        args = [sys.executable, "-m", "senddock", "bounces", "ingest", "--recipient", to]
        done = subprocess.run(args, input=raw, env=env, capture_output=True, check=False)
        assert done.returncode == 0, done.stderr

    began = time.perf_counter()
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(one, range(count)))
    return count / (time.perf_counter() - began)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000, help="DSNs through the listener")
    parser.add_argument("--pipe", type=int, default=200, help="DSNs through `bounces ingest`")
    parser.add_argument("--clients", type=int, default=4, help="concurrent sessions/processes")
    args = parser.parse_args()
    with given_or_embedded("sdbounce") as url:
        jobs = targets(url)
        served = listen(url, jobs, args.count, args.clients)
        piped = pipe(url, jobs, args.pipe, args.clients)
    table = Table(title=f"bounces, {args.clients} concurrent clients, {os.cpu_count()} cores")
    for column in ("path", "bounces", "per second", "serve RSS (MiB)"):
        table.add_column(column, justify="right")
    first = min(FIRST, args.count)
    mib = 1024
    table.add_row(
        "serve", f"{first:,}", f"{served['rate_first']:.0f}", f"{served['rss_first'] / mib:.1f}"
    )
    table.add_row(
        "serve", f"{args.count:,}", f"{served['rate']:.0f}", f"{served['rss_last'] / mib:.1f}"
    )
    table.add_row("ingest", f"{args.pipe:,}", f"{piped:.1f}", "-")
    Console().print(table)
    print(f"serve RSS at the end / after {first:,}: {served['rss_last'] / served['rss_first']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
