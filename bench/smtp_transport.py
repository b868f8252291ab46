"""SendDock's SMTP transport against aiosmtplib's own send, on smtp-sink, in one run.

    .venv/bin/python bench/smtp_transport.py                  # 20,000 messages, 3 rounds
    .venv/bin/python bench/smtp_transport.py --messages 50000 --sessions 20

Each variant sends the same ~1.5 KB message to a new address over reused sessions in one
uvloop process, with no rendering and no database: only the SMTP work differs.
 - aiosmtplib: its `mail()`, `rcpt()` and `data()`, one round trip each (DATA two);
 - one by one: smtp/session.py with the server's PIPELINING ignored, four round trips;
 - pipelined: smtp/session.py as the worker uses it next to the relay (RFC 2920), two round
   trips: MAIL, RCPT and DATA in one write, the body and its dot in another;
 - envelope with the dot: as the worker uses it with a relay a millisecond or more away, the
   next message's envelope in the same write as the final dot, one round trip.
The variants run interleaved; each shows its best round, and its ratio to aiosmtplib's.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import time
from collections.abc import Awaitable, Callable

import aiosmtplib
import uvloop
from rich.console import Console
from rich.table import Table

from senddock.config import SmtpTarget
from senddock.smtp.session import SmtpSession
from speed import smtp_sink

BODY = (
    b"From: News <news@example.org>\r\nSubject: this week\r\nMIME-Version: 1.0\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n\r\n" + b"All the news that fits. " * 60 + b"\r\n"
)
SENDER = "news@example.org"

Send = Callable[[str, str | None], Awaitable[bool]]  # (recipient, the session's next one)
Session = tuple[Send, Callable[[], Awaitable[object]]]  # send one, and quit
Start = Callable[[str], Awaitable[Session]]


async def aiosmtplib_session(url: str) -> Session:
    t = SmtpTarget.parse(url)
    smtp = aiosmtplib.SMTP(
        hostname=t.host, port=t.port, start_tls=False, local_hostname=socket.gethostname()
    )
    await smtp.connect()

    async def send(rcpt: str, _: str | None) -> bool:
        await smtp.mail(SENDER)
        await smtp.rcpt(rcpt)
        return (await smtp.data(BODY)).code == 250

    return send, smtp.quit


def senddock_session(pipelining: bool, ahead: bool = False) -> Start:
    async def start(url: str) -> Session:
        session = SmtpSession(SmtpTarget.parse(url), timeout=60, ahead_min_rtt=0.0)
        assert await session.open() is None
        session._pipelining = pipelining  # a benchmark knob, not a setting

        async def send(rcpt: str, following: str | None) -> bool:
            nxt = (SENDER, following) if ahead and following is not None else None
            return (await session.send(SENDER, rcpt, BODY, then=lambda: nxt)).code == 250

        return send, session.quit

    return start


VARIANTS: dict[str, Start] = {
    "aiosmtplib mail/rcpt/data": aiosmtplib_session,
    "SendDock, one by one": senddock_session(False),
    "SendDock, pipelined": senddock_session(True),
    "SendDock, envelope with the dot": senddock_session(True, ahead=True),
}


async def run(start: Start, url: str, n: int, sessions: int) -> tuple[float, float]:
    """(msg/s, CPU microseconds per message) for n messages over `sessions` sessions."""
    todo = [f"reader{i}@example.com" for i in range(n)]
    sent = 0

    async def one() -> None:
        nonlocal sent
        send, quit_ = await start(url)
        rcpt = todo.pop() if todo else None
        while rcpt is not None:
            following = todo.pop() if todo else None  # this session's next, known in advance
            if await send(rcpt, following):
                sent += 1
            rcpt = following
        await quit_()

    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one() for _ in range(sessions)))
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    if sent != n:
        raise SystemExit(f"only {sent} of {n} accepted")
    return sent / took, cpu * 1e6 / sent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    best: dict[str, tuple[float, float]] = {}
    with smtp_sink() as (url, _):
        for _ in range(args.rounds):
            for name, start in VARIANTS.items():
                rate, cpu = uvloop.run(run(start, url, args.messages, args.sessions))
                if name not in best or rate > best[name][0]:
                    best[name] = (rate, cpu)
    base = best["aiosmtplib mail/rcpt/data"][0]
    table = Table(
        title=f"{args.messages:,} messages, {args.sessions} sessions, one process, smtp-sink "
        f"(best of {args.rounds} rounds)"
    )
    for col in ("variant", "msg/s", "÷ aiosmtplib", "CPU µs/msg"):
        table.add_column(col, justify="left" if col == "variant" else "right")
    for name, (rate, cpu) in best.items():
        table.add_row(name, f"{rate:,.0f}", f"{rate / base:.2f}", f"{cpu:.0f}")
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
