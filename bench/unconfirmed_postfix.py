"""Issue 41 against a real relay: after SIGKILLs, how many `unconfirmed` jobs Postfix had queued.

    .venv/bin/python bench/unconfirmed_postfix.py              # 3 runs each way (root, Postfix)
    .venv/bin/python bench/unconfirmed_postfix.py --runs 5 --kills 4

Each run: a database of its own on one embedded Postgres, a private Postfix
(tests/postfix_relay.py) that relays to an aiosmtpd catcher, 1,500 recipients, and a worker
(5 SMTP sessions) SIGKILLed --kills times at random moments of the drain and restarted at
once. Postfix answers a final dot only once the message is in its queue, and keeps it whatever
its client does next, so an unconfirmed job it did not queue is a false alarm: its dot never
went. Counted once Postfix's queue has drained, at the catcher behind it. Runs alternate
between the dot log (delivery/dotlog.py: the restarted worker reads the dead one's) and
SENDDOCK_DOT_LOG_DIR=off (every marked job unconfirmed, as a rescuer on another host sees
it). Prints each run and the share over all; exits 1 if anyone was lost or sent twice.
"""

from __future__ import annotations

import argparse
import functools
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import postfix_relay
from crash_support import Fleet, addresses, worker_id
from senddock.db import connect, migrate
from senddock.db.embedded import EmbeddedPostgres
from senddock.testing import Catcher
from support import jobs, send_campaign, wait_until, worker_env
from web_support import free_ports

LIVENESS = {"SENDDOCK_LEASE_SECONDS": "6", "SENDDOCK_HEARTBEAT_INTERVAL": "0.5"}


def one_run(
    server: str, workdir: Path, n: int, kills: int, seed: int, dot_log: bool
) -> dict[str, int]:
    """One campaign through Postfix with `kills` SIGKILLs; its figures."""
    name = f"pf_{seed}_{int(dot_log)}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"'.encode())
    url = urlunsplit(urlsplit(server)._replace(path="/" + name))
    rng = random.Random(seed)
    emails = addresses(n)
    relay_port, bounce_port = free_ports(2)
    logs = workdir / name
    logs.mkdir(parents=True)
    fleet = Fleet(logs, 5)
    with (
        connect(url) as conn,
        Catcher() as remote,
        postfix_relay.private_postfix(relay_port, remote.port, bounce_port) as relay,
    ):
        migrate(conn)
        dots = "" if dot_log else "off"
        env = worker_env(url, relay.url, SENDDOCK_DOT_LOG_DIR=dots, **LIVENESS)
        _, bid = send_campaign(conn, "news", emails)
        try:
            points = sorted(rng.randint(n // 10, n * 8 // 10) for _ in range(kills))
            for point in points:
                proc = fleet.start(env, f"killed-at-{point}")
                worker_id(conn, proc)
                assert wait_until(functools.partial(_reached, conn, bid, point), 120), "stuck"
                proc.kill()
            last = fleet.start(env, "finisher")
            settled = {"sent", "unconfirmed"}
            assert wait_until(lambda: set(_statuses(conn, bid)) <= settled, 180), "unsettled"
            last.stop()
        finally:
            fleet.close()
        assert wait_until(lambda: _drained(relay), 120), "Postfix did not drain"
        rows = jobs(conn, bid)
        got = remote.count_by_rcpt()
        unconfirmed = [e for e, r in rows.items() if r["status"] == "unconfirmed"]
        sent = [e for e, r in rows.items() if r["status"] == "sent"]
        for e in unconfirmed:
            if not got[e]:  # a false alarm: what Postfix logged of that message
                _explain(relay.log(), str(rows[e]["message_id"]), e, dot_log)
        return {
            "unconfirmed": len(unconfirmed),
            "queued": sum(1 for e in unconfirmed if got[e]),
            "lost": sum(1 for e in sent if not got[e]),
            "duplicates": sum(1 for k in got.values() if k > 1),
        }


def _explain(log: str, message_id: str, email: str, dot_log: bool) -> None:
    """Print Postfix's lines about an unconfirmed message it never queued."""
    lines = log.splitlines()
    print(f"not queued (dot log {'on' if dot_log else 'off'}): {email} {message_id}")
    ids = [ln.split(": ")[1] for ln in lines if message_id in ln and "message-id=" in ln]
    if not ids:
        print("  Postfix never logged its Message-ID: its header never arrived")
    for qid in ids:
        start = next(i for i, ln in enumerate(lines) if f"{qid}: client=" in ln)
        smtpd = lines[start].split(": ")[0].rsplit(" ", 1)[-1]  # postfix/smtpd[PID]
        after = [ln for ln in lines[start:] if smtpd in ln or qid in ln]
        end = next((i for i, ln in enumerate(after) if "disconnect from" in ln), 8)
        for ln in after[: end + 1]:
            print("  " + ln)


def _reached(conn: psycopg.Connection[dict[str, object]], bid: int, n: int) -> bool:
    return _statuses(conn, bid)["sent"] >= n


def _statuses(conn: psycopg.Connection[dict[str, object]], bid: int) -> Counter[str]:
    rows = conn.execute(
        "SELECT status, count(*) AS n FROM broadcast_jobs WHERE broadcast_id = %s GROUP BY 1",
        (bid,),
    ).fetchall()
    return Counter({str(r["status"]): int(str(r["n"])) for r in rows})


def _drained(relay: postfix_relay.Relay) -> bool:
    text = relay.log()
    return text.count(": removed") == text.count("(queue active)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs each way")
    parser.add_argument("--kills", type=int, default=3, help="SIGKILLs a run")
    parser.add_argument("--recipients", type=int, default=1_500)
    parser.add_argument("--seed", type=int, default=20_241_207)
    args = parser.parse_args(argv)
    need = postfix_relay.available()
    if need:
        sys.exit(need)
    workdir = Path(tempfile.mkdtemp(prefix="senddock-pf-bench-"))
    pg = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="sdpf")) / "pg", delete=True)
    server = pg.start()
    table = Table(title="Unconfirmed jobs Postfix had queued, after SIGKILLs")
    for col in ("run", "dot log", "unconfirmed", "queued by Postfix", "share", "lost", "twice"):
        table.add_column(col, justify="right")
    totals: dict[bool, Counter[str]] = {True: Counter(), False: Counter()}
    bad = False
    t0 = time.monotonic()
    try:
        for i in range(args.runs):
            for dot_log in (i % 2 == 0, i % 2 != 0):  # alternate which goes first
                seed = args.seed + i
                r = one_run(server, workdir, args.recipients, args.kills, seed, dot_log)
                totals[dot_log].update(r)
                bad = bad or r["lost"] > 0 or r["duplicates"] > 0
                share = f"{r['queued'] / r['unconfirmed']:.2f}" if r["unconfirmed"] else "–"
                table.add_row(
                    f"{i + 1} (seed {seed})",
                    "on" if dot_log else "off",
                    str(r["unconfirmed"]),
                    str(r["queued"]),
                    share,
                    str(r["lost"]),
                    str(r["duplicates"]),
                )
    finally:
        pg.stop()
    out = Console(width=120)
    out.print(table)
    for dot_log in (True, False):
        t = totals[dot_log]
        if t["unconfirmed"]:
            out.print(
                f"dot log {'on ' if dot_log else 'off'}: {t['queued']} of {t['unconfirmed']}"
                f" unconfirmed queued by Postfix ({t['queued'] / t['unconfirmed']:.2f})",
                highlight=False,
            )
    out.print(f"wall time {time.monotonic() - t0:.0f}s", highlight=False)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
