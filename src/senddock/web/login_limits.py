"""How many sign-ins are checked: attempts counted in Postgres, passwords checked on a bound.

Attempts. Each POST /login is counted before its password is checked, by one UPSERT ...
RETURNING per key that adds the attempt and says how many the key has in its window, so
parallel requests cannot all pass a check before any is counted, and every `serve` process of
one database shares the counts. Keys, in the order they are counted (a refusal stops there):

  pair:ADDRESS|IP   5 a window    one client guessing one admin's password
  ip:IP             20 a window   one client trying many addresses
  address:ADDRESS   50 a window   many clients guessing one admin's password

The window is 5 minutes from a key's first attempt. A client that hits its pair limit adds
nothing more to the address count, so one client alone cannot lock the admin out from
elsewhere: it takes 10 clients to reach the address ceiling (the price of stopping a
distributed guesser). A successful sign-in clears its pair and gives back its count on the
others; so does an attempt refused because the checker is busy. ADDRESS is
auth.login_address (the form the admin is looked up by); IP is the client's address as
uvicorn reports it (X-Forwarded-For only from SENDDOCK_TRUSTED_PROXIES), an IPv6 one by its
/64, which one host commonly holds whole.

Checks. argon2 takes ~0.25 s and 64 MiB a check; run in the thread pool that serves every
other request, 80 parallel sign-ins made an API read take 11 s. `Checker` runs them on its
own threads (half the cores, at most 2) with at most 16 waiting; beyond that a sign-in is
answered 429 at once, before it is counted or hashed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import psycopg

from senddock.db import sql
from senddock.web.auth import login_address

Conn = psycopg.Connection[dict[str, Any]]
T = TypeVar("T")

WINDOW = 300.0
PAIR_LIMIT = 5
IP_LIMIT = 20
ADDRESS_LIMIT = 50
# At most half the cores, 2 at most: on 2 cores, 2 threads of argon2 took both and an API
# read waited ~500 ms behind them; with 1 it took ~70 ms (80 sign-ins in flight).
CHECK_THREADS = max(1, min(2, len(os.sched_getaffinity(0)) // 2))
CHECKS_WAITING = 16

QUERIES = sql.load(__package__, "login_limits.sql")


def client_key(host: str | None) -> str:
    """The client address attempts are counted under: IPv4 as is, IPv6 by its /64."""
    try:
        ip = ipaddress.ip_address(host or "")
    except ValueError:
        return (host or "unknown")[:100]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


@dataclass(frozen=True)
class Attempt:
    """One sign-in attempt, counted: whether its password may be checked, and its keys."""

    allowed: bool
    pair: str
    counted: tuple[str, ...]  # the keys this attempt was counted under, pair first


def keys(email: str, host: str | None) -> list[tuple[str, int]]:
    """The (key, limit) pairs an attempt is counted under, in order."""
    address = login_address(email)[:254]
    ip = client_key(host)
    return [
        (f"pair:{address}|{ip}", PAIR_LIMIT),
        (f"ip:{ip}", IP_LIMIT),
        (f"address:{address}", ADDRESS_LIMIT),
    ]


def count(conn: Conn, key: str) -> int:
    """Count one attempt under `key` in its window (shared by every process); how many the
    key has now, this one included. Other limits (web/signup.py) count here too, under keys
    of their own prefix, so one table and one sweep serve them all."""
    row = conn.execute(QUERIES["reserve"], {"key": key, "window": timedelta(seconds=WINDOW)})
    found = row.fetchone()
    assert found is not None
    return int(found["attempts"])


def sweep(conn: Conn) -> None:
    """Forget a few keys whose window is over."""
    conn.execute(QUERIES["sweep"], {"window": timedelta(seconds=WINDOW)})


def reserve(conn: Conn, email: str, host: str | None) -> Attempt:
    """Count a sign-in attempt by `email` from `host` before its password is checked."""
    wanted = keys(email, host)
    counted: list[str] = []
    for key, limit in wanted:
        attempts = count(conn, key)
        counted.append(key)
        if attempts > limit:
            return Attempt(False, wanted[0][0], tuple(counted))
    sweep(conn)
    return Attempt(True, wanted[0][0], tuple(counted))


def give_back(conn: Conn, attempt: Attempt) -> None:
    """Uncount an attempt whose password was never checked (the checker was busy)."""
    conn.execute(QUERIES["give_back"], {"keys": list(attempt.counted)})


def succeeded(conn: Conn, attempt: Attempt) -> None:
    """A successful sign-in: its pair starts afresh, and it counts nowhere else."""
    conn.execute(QUERIES["clear_pair"], {"key": attempt.pair})
    others = [k for k in attempt.counted if k != attempt.pair]
    conn.execute(QUERIES["give_back"], {"keys": others})


class Checker:
    """Password checks on `threads` threads of their own, at most `waiting` more queued.

    Slots are taken and given back on the event loop's thread only, so a plain count is safe.
    """

    def __init__(self, threads: int = CHECK_THREADS, waiting: int = CHECKS_WAITING) -> None:
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="senddock-login")
        self._slots = threads + waiting
        self._taken = 0

    def full(self) -> bool:
        """Whether every slot is taken: a sign-in now would be refused (cheap to ask first)."""
        return self._taken >= self._slots

    @contextlib.contextmanager
    def slot(self) -> Iterator[bool]:
        """Whether a check may run (or wait its turn) now; False when the queue is full."""
        if self.full():
            yield False
            return
        self._taken += 1
        try:
            yield True
        finally:
            self._taken -= 1

    async def run(self, check: Callable[..., T], *args: Any) -> T:
        """`check(*args)` on the checker's threads (call it holding a slot)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(check, *args))

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
