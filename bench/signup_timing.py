"""Whether the time of a POST /subscribe tells what the address was: new, a confirmed member,
one who left, or suppressed.

    .venv/bin/python bench/signup_timing.py              # 60 rounds
    .venv/bin/python bench/signup_timing.py --rounds 200

One real `senddock serve --no-workers` process, the relay an in-process Catcher. Each round
posts one sign-up of each kind, in a shuffled order, each from its own client IP (sent as
X-Forwarded-For, the server trusting 127.0.0.1 as its proxy) so the per-IP limit never
answers instead. Printed per kind: median and 90th percentile of the answer's time, and the
median over the new address's. tests/test_signup.py asserts the answers are byte for byte the
same; the time is a measurement, so it lives here.
2026-12-03, two cores shared with other test runs (load ~8), --rounds 200: medians 10.85,
10.93, 10.03 and 10.22 ms (new, member, left, suppressed; over new 1.00, 1.01, 0.92, 0.94),
no order that repeats between runs. When the sign-up's statements still ran before the
answer (only the mail after it), --rounds 100: suppressed, which writes nothing, 13.46 ms
against 18.25 for a new address (0.74), every run; so now all of it runs after the answer.
Uses SENDDOCK_DATABASE_URL if set, else an embedded Postgres in a temp folder.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from senddock.audience import signup, subscribers, suppressions
from senddock.audience.lists import configure
from senddock.campaigns.compose import link_key
from senddock.config import load
from senddock.db import connect, migrate
from senddock.db.embedded import given_or_embedded
from senddock.testing import Catcher

SRC = Path(__file__).resolve().parent.parent / "src"
KINDS = ("new", "confirmed member", "left the list", "suppressed")
LEAVE = """
UPDATE list_memberships SET status = 'unsubscribed'
WHERE subscriber_id = (SELECT id FROM subscribers WHERE email = %(email)s)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    with given_or_embedded("sdsignup") as url, Catcher() as catcher:
        with connect(url) as conn:
            migrate(conn)
            list_id = configure(conn, "bench", double_opt_in=True, from_addr="b@example.org")
            signup.set_public(conn, list_id, True)
            token = signup.form_token(link_key(conn, load()), list_id)
            subscribers.add(conn, "member@example.com", lists=("bench",))
            subscribers.add(conn, "left@example.com", lists=("bench",))
            suppressions.add(conn, "blocked@example.com")
            conn.execute("UPDATE list_memberships SET status = 'confirmed'")
        port = free_port()
        env = dict(os.environ)
        env.update(
            SENDDOCK_DATABASE_URL=url,
            SENDDOCK_SMTP_URL=catcher.url,
            SENDDOCK_TRUSTED_PROXIES="127.0.0.1",
            PYTHONPATH=str(SRC),
        )
        cmd = [sys.executable, "-m", "senddock", "serve", "--no-workers", "--port", str(port)]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            times = run(base, token, args.rounds, url)
        finally:
            proc.terminate()
            proc.wait(30)
    new = statistics.median(times["new"])
    print(f"{args.rounds} rounds, each kind once a round, shuffled; ms per answer")
    print(f"{'kind':<18} {'median':>8} {'p90':>8} {'/ new':>7}")
    for kind in KINDS:
        got = sorted(times[kind])
        p90 = got[int(len(got) * 0.9) - 1]
        med = statistics.median(got)
        print(f"{kind:<18} {med:8.2f} {p90:8.2f} {med / new:7.2f}")


def run(base: str, token: str, rounds: int, url: str) -> dict[str, list[float]]:
    up = False
    for _ in range(300):  # 60 s for the server to answer /healthz
        with contextlib.suppress(httpx.HTTPError):
            up = httpx.get(base + "/healthz", timeout=1).status_code == 200
        if up:
            break
        time.sleep(0.2)
    times: dict[str, list[float]] = {k: [] for k in KINDS}
    addresses = {
        "confirmed member": "member@example.com",
        "left the list": "left@example.com",
        "suppressed": "blocked@example.com",
    }
    n = 0
    with httpx.Client(base_url=base, timeout=30) as client, connect(url) as conn:
        for r in range(rounds + 5):  # the first 5 rounds warm up and are not counted
            kinds = list(KINDS)
            random.shuffle(kinds)
            for kind in kinds:
                n += 1
                address = addresses.get(kind) or f"new{n}@example.com"
                ip = f"10.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}"
                fields = {"list": token, "email": address}
                if kind == "left the list":  # left again before each round (outside the timing)
                    conn.execute(LEAVE, {"email": address})
                started = time.perf_counter()
                answer = client.post("/subscribe", data=fields, headers={"X-Forwarded-For": ip})
                took = (time.perf_counter() - started) * 1000
                assert answer.status_code == 200, answer.text
                if r >= 5:
                    times[kind].append(took)
    return times


if __name__ == "__main__":
    main()
