"""`senddock serve` on the open internet (issue 19), each promise over real HTTP against real
`senddock serve` processes: sign-in limits that parallel requests and several processes
cannot beat, keys a client cannot choose, sessions and tokens that end when they should, and
sign-ins that cannot starve the API."""

from __future__ import annotations

import json
import re
import secrets
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from support import senddock, worker_env
from web_support import Server, ServerFactory, make_admin, make_token, servers

EMAIL = "admin@example.org"
PASSWORD = "correct horse battery staple"
TRUSTED = {"SENDDOCK_TRUSTED_PROXIES": "127.0.0.1"}


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    yield from servers(db_url)


@pytest.fixture
def admin(db_url: str) -> None:
    make_admin(db_url, EMAIL, PASSWORD)


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "the page has no CSRF field"
    return found.group(1)


class Browser:
    """One browser: a cookie jar, the login form's CSRF token, an X-Forwarded-For if given."""

    def __init__(self, server: Server, forwarded: str | None = None) -> None:
        headers = {"X-Forwarded-For": forwarded} if forwarded else {}
        self.http = httpx.Client(
            base_url=server.url, timeout=120, follow_redirects=False, headers=headers
        )
        self.csrf = csrf_of(self.http.get("/login").text)

    def log_in(self, email: str = EMAIL, password: str = PASSWORD) -> int:
        """The status of POST /login: 303 signed in, 401 wrong, 429 refused unchecked."""
        form = {"csrf": self.csrf, "email": email, "password": password, "next": "/"}
        status = self.http.post("/login", data=form).status_code
        if status == 303:
            self.csrf = csrf_of(self.http.get("/").text)
        return status

    def close(self) -> None:
        self.http.close()


def parallel(browsers: list[Browser], email: str, password: str) -> list[int]:
    """One POST /login per browser, all released at the same instant."""
    start = threading.Barrier(len(browsers))

    def one(b: Browser) -> int:
        start.wait()
        return b.log_in(email, password)

    with ThreadPoolExecutor(len(browsers)) as pool:
        return list(pool.map(one, browsers))


# -- 1. the attempt is counted before the password is checked, in Postgres -----------------


def test_thirty_parallel_guesses_get_at_most_five_checked(
    admin: None, serve: ServerFactory
) -> None:
    """The limiter was asked before argon2 and told after it: 30 parallel guesses were all
    checked, and the right password as the 30th signed in."""
    server = serve(workers=False)
    browsers = [Browser(server) for _ in range(30)]
    try:
        statuses = parallel(browsers, EMAIL, "a wrong guess")
        assert set(statuses) <= {401, 429}, statuses
        checked = sum(1 for s in statuses if s != 429)
        print(f"30 parallel guesses: {checked} checked, {statuses.count(429)} refused")
        assert checked <= 5, Counter(statuses)
        assert browsers[0].log_in() == 429
    finally:
        for b in browsers:
            b.close()


def test_two_serve_processes_share_one_lockout(admin: None, serve: ServerFactory) -> None:
    """Each process kept its own count in memory: N processes allowed N x 5 guesses."""
    one, two = serve(workers=False), serve(workers=False)
    a, b = Browser(one), Browser(two)
    assert [a.log_in(password="wrong guess") for _ in range(3)] == [401] * 3
    assert [b.log_in(password="wrong guess") for _ in range(2)] == [401] * 2
    assert a.log_in() == 429
    assert b.log_in() == 429


# -- 2. keys a client cannot choose -----------------------------------------------------------


def test_x_forwarded_for_from_an_untrusted_peer_does_not_change_the_key(
    admin: None, serve: ServerFactory
) -> None:
    """uvicorn trusted X-Forwarded-For from 127.0.0.1 by default: behind a same-host proxy that
    passes the client's header along, each guess could claim a new address."""
    server = serve(workers=False)
    for i in range(5):
        assert Browser(server, f"198.51.100.{i}").log_in(password="wrong guess") == 401
    assert Browser(server, "198.51.100.99").log_in() == 429


def test_x_forwarded_for_from_a_trusted_proxy_names_the_client(
    admin: None, serve: ServerFactory
) -> None:
    server = serve(workers=False, env=TRUSTED)
    guesser = Browser(server, "198.51.100.1")
    assert [guesser.log_in(password="wrong guess") for _ in range(5)] == [401] * 5
    assert guesser.log_in() == 429
    # The admin elsewhere is not locked out by one client's guesses.
    assert Browser(server, "203.0.113.7").log_in() == 303


def test_a_dotted_capital_i_shares_the_key_of_the_plain_address(
    admin: None, serve: ServerFactory
) -> None:
    """`admİn@` (U+0130) lowers to `admi̇n@` in Python, not `admin@`: it had a fresh key."""
    server = serve(workers=False)
    browser = Browser(server)
    for email in ("admİn@example.org", "ADMIN@example.org", "admİn@example.org") + (EMAIL,) * 2:
        assert browser.log_in(email, "wrong guess") == 401, email
    assert browser.log_in() == 429


def test_many_clients_guessing_one_address_reach_its_ceiling(
    admin: None, serve: ServerFactory
) -> None:
    """Five guesses each from ten addresses is the address's 50: an eleventh client, even
    with the right password, waits for the window to end."""
    server = serve(workers=False, env=TRUSTED)
    browsers = [Browser(server, f"198.51.100.{i}") for i in range(10)]

    def five(b: Browser) -> list[int]:
        return [b.log_in(password="wrong guess") for _ in range(5)]

    with ThreadPoolExecutor(10) as pool:
        assert list(pool.map(five, browsers)) == [[401] * 5] * 10
    assert Browser(server, "203.0.113.7").log_in() == 429


def test_one_client_trying_many_addresses_reaches_its_ceiling(
    admin: None, serve: ServerFactory
) -> None:
    server = serve(workers=False, env=TRUSTED)
    sprayer = Browser(server, "198.51.100.1")
    for i in range(20):
        assert sprayer.log_in(f"user{i}@example.org", "wrong guess") == 401
    assert sprayer.log_in() == 429
    assert Browser(server, "198.51.100.2").log_in() == 303


# -- 3. sessions and tokens end when they should ---------------------------------------------


def cli(db_url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "senddock", *args],
        env=worker_env(db_url, "smtp://127.0.0.1:1"),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def refused(server: Server, browser: Browser) -> bool:
    """The dashboard sends this browser to /login and the API answers it 401, read and write."""
    page = browser.http.get("/")
    read = browser.http.get("/api/v1/lists")
    write = browser.http.post(
        "/api/v1/lists", json={"name": f"l{secrets.token_hex(3)}"}, headers={"X-CSRF-Token": ""}
    )
    return (
        page.status_code,
        page.headers.get("location"),
        read.status_code,
        write.status_code,
    ) == (
        303,
        "/login?next=/",
        401,
        401,
    )


def works(browser: Browser) -> bool:
    page = browser.http.get("/")
    made = browser.http.post(
        "/api/v1/lists",
        json={"name": f"l{secrets.token_hex(3)}"},
        headers={"X-CSRF-Token": browser.csrf},
    )
    return (page.status_code, made.status_code) == (200, 201)


def test_a_logged_out_cookie_is_refused(admin: None, serve: ServerFactory) -> None:
    """The session lived in the cookie alone: logout set a new one, but a copy of the old one
    still read the dashboard and wrote through the API (201)."""
    server = serve(workers=False)
    browser = Browser(server)
    assert browser.log_in() == 303
    stolen = Browser(server)
    stolen.http.cookies = httpx.Cookies(browser.http.cookies)
    stolen.csrf = browser.csrf
    assert works(stolen)
    assert browser.http.post("/logout", data={"csrf": browser.csrf}).status_code == 303
    assert refused(server, stolen)
    assert refused(server, browser)


def test_a_removed_admins_cookie_is_refused(db_url: str, admin: None, serve: ServerFactory) -> None:
    server = serve(workers=False)
    browser = Browser(server)
    assert browser.log_in() == 303
    assert works(browser)
    cli(db_url, "admin", "remove", EMAIL)
    assert refused(server, browser)


def test_a_password_change_ends_every_session_of_the_admin(
    db_url: str, admin: None, serve: ServerFactory
) -> None:
    server = serve(workers=False)
    here, there = Browser(server), Browser(server)
    assert here.log_in() == 303 and there.log_in() == 303
    assert works(here) and works(there)
    cli(db_url, "admin", "password", EMAIL, stdin="a brand new passphrase\n")
    assert refused(server, here) and refused(server, there)
    assert Browser(server).log_in(password="a brand new passphrase") == 303


def test_a_session_ends_when_idle_and_at_its_lifetime(admin: None, serve: ServerFactory) -> None:
    idle = serve(workers=False, env={"SENDDOCK_SESSION_IDLE_TIMEOUT": "2s"})
    browser = Browser(idle)
    assert browser.log_in() == 303
    for _ in range(3):  # used within 2 s each time: still alive after 3 s
        time.sleep(1)
        assert works(browser)
    time.sleep(2.5)
    assert refused(idle, browser)

    short = serve(workers=False, env={"SENDDOCK_SESSION_LIFETIME": "3s"})
    browser = Browser(short)
    assert browser.log_in() == 303
    assert works(browser)
    time.sleep(3.5)
    assert refused(short, browser)


def test_an_expired_token_is_refused(db_url: str, serve: ServerFactory) -> None:
    server = serve(workers=False)
    # Made last, with room for a loaded machine: it must still be valid at its first use.
    lasting = cli(db_url, "token", "create", "--expires-in", "30d").stdout.strip()
    token = cli(db_url, "token", "create", "--name", "brief", "--expires-in", "5s").stdout.strip()
    made = time.monotonic()  # it expires at most 5 s from now
    with server.client(token) as api, server.client(lasting) as other:
        assert api.get("/api/v1/lists").status_code == 200
        time.sleep(max(0.0, made + 5.5 - time.monotonic()))
        assert api.get("/api/v1/lists").status_code == 401
        assert other.get("/api/v1/lists").status_code == 200
    listed = cli(db_url, "token", "list").stdout
    assert re.search(r"token 2  brief .* expired \d{4}-", listed), listed
    assert re.search(r"token 1 .* expires \d{4}-", listed), listed


def test_a_revoked_token_is_refused_at_once(db_url: str, serve: ServerFactory) -> None:
    server = serve(workers=False)
    token = make_token(db_url, "soon revoked")
    with server.client(token) as api:
        assert api.get("/api/v1/lists").status_code == 200
        assert senddock(worker_env(db_url, "smtp://x"), "token", "revoke", "1").returncode == 0
        assert api.get("/api/v1/lists").status_code == 401


# -- 5. sign-ins cannot starve the API ---------------------------------------------------------


# 80 clients that each keep a sign-in in flight, from a new address and a new IP (through a
# trusted proxy) each time, pausing 0.1 s after a refusal; in a process of its own, so that its
# work does not hold the GIL of the process measuring the API. It stops when the file named by
# its second argument exists, and prints "ready" as all 80 start, then the statuses it got.
SIGN_INS = """
import asyncio, json, os, re, secrets, sys
import httpx

async def client(url, n, stop, statuses, ready, go):
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        page = (await http.get("/login")).text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
        ready.append(n)
        if len(ready) == 80:
            print("ready", flush=True)
            go.set()
        await go.wait()
        while not os.path.exists(stop):
            form = {"csrf": csrf, "email": secrets.token_hex(6) + "@example.org",
                    "password": "a wrong guess", "next": "/"}
            ip = f"10.{n}.{secrets.randbelow(250)}.1"
            r = await http.post("/login", data=form, headers={"X-Forwarded-For": ip})
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            if r.status_code == 429:
                await asyncio.sleep(0.1)

async def main(url, stop):
    statuses, ready, go = {}, [], asyncio.Event()
    await asyncio.gather(*(client(url, n, stop, statuses, ready, go) for n in range(80)))
    print(json.dumps(statuses))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def test_eighty_sign_ins_in_flight_leave_the_api_answering(
    db_url: str, admin: None, serve: ServerFactory, tmp_path: Path
) -> None:
    """argon2 (~0.25 s, 64 MiB) ran in the thread pool that serves everything: 80 parallel
    sign-ins made GET /api/v1/lists take 11 s instead of 5 ms. Now the checks have 2 threads
    of their own and a queue of 16; beyond that a sign-in is refused before hashing."""
    server = serve(workers=False, env=TRUSTED)
    token = make_token(db_url)
    stop = tmp_path / "stop"
    attack = subprocess.Popen(
        [sys.executable, "-c", SIGN_INS, server.url, str(stop)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert attack.stdout is not None
        assert attack.stdout.readline().strip() == "ready"  # 80 sign-ins start now
        time.sleep(1)
        times = []
        with server.client(token) as api:
            for _ in range(5):
                began = time.perf_counter()
                assert api.get("/api/v1/lists").status_code == 200
                times.append(time.perf_counter() - began)
                time.sleep(0.2)
        stop.touch()
        out, _ = attack.communicate(timeout=120)
    finally:
        if attack.poll() is None:
            attack.kill()
            attack.wait()
    statuses = {int(k): v for k, v in json.loads(out).items()}
    median = statistics.median(times)
    print(
        f"GET /api/v1/lists with 80 sign-ins in flight: median {median * 1000:.0f} ms,"
        f" max {max(times) * 1000:.0f} ms; sign-ins answered {statuses}"
    )
    assert median < 1.0, times
    assert statuses.get(429, 0) > 0  # the queue of checks was full: refused before hashing


def test_a_sign_in_as_nobody_checks_a_hash_as_costly_as_an_admins() -> None:
    """An unknown address is checked against a fixed hash so that it takes as long as a known
    one: that hash must carry the hasher's own parameters (a cheaper one would tell an attacker
    which addresses are admins), and no password opens it."""
    from senddock.web import auth

    hashed = auth._DUMMY_HASH
    assert not auth._hasher.check_needs_rehash(hashed)
    assert hashed.startswith("$argon2id$")
    assert not auth.verify_password(hashed, "")
