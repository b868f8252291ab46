"""bench/relay_delay.py, the relay at a network distance that `bench/speed.py --rtt-ms` and
`bench/ab.py --rtt-ms` put in front of smtp-sink: it passes every byte, in order, a round trip
later than the relay would answer, and it carries a whole message through to the relay.
"""

from __future__ import annotations

import importlib.util
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from senddock.testing import Catcher

# bench/ is not a package: load the script by its path, as `bench/speed.py` imports it.
_SPEC = importlib.util.spec_from_file_location(
    "relay_delay", Path(__file__).resolve().parent.parent / "bench" / "relay_delay.py"
)
assert _SPEC is not None and _SPEC.loader is not None
relay_delay = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(relay_delay)

RTT = 0.08  # seconds: far above loopback's, so that a proxy adding none cannot pass


@pytest.fixture
def relayed() -> Iterator[tuple[Catcher, int]]:
    with Catcher() as catcher, relay_delay.running(catcher.port, RTT * 1000) as port:
        yield catcher, port


def _reply(sock: socket.socket) -> bytes:
    """One whole SMTP reply (its last line has a space after the code)."""
    data = b""
    while True:
        chunk = sock.recv(4096)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
        lines = data.split(b"\r\n")
        if len(lines) > 1 and lines[-2][3:4] == b" ":
            return data


def test_every_reply_comes_a_round_trip_later(relayed: tuple[Catcher, int]) -> None:
    _, port = relayed
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        assert _reply(sock).startswith(b"220 ")
        for command in (b"EHLO bench.example", b"NOOP", b"RSET"):
            t0 = time.perf_counter()
            sock.sendall(command + b"\r\n")
            reply = _reply(sock)
            took = time.perf_counter() - t0
            assert reply.startswith(b"250"), reply
            assert took >= RTT * 0.95, f"{command!r} answered in {took * 1000:.0f} ms"


def test_a_pipelined_message_reaches_the_relay_intact(relayed: tuple[Catcher, int]) -> None:
    catcher, port = relayed
    lines = b"".join(b"line %d of many\r\n" % i for i in range(5_000))  # about 90 KB
    body = b"Subject: through the proxy\r\n\r\n" + lines
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        _reply(sock)
        sock.sendall(b"EHLO bench.example\r\n")
        _reply(sock)
        sock.sendall(b"MAIL FROM:<news@example.org>\r\nRCPT TO:<reader@example.com>\r\nDATA\r\n")
        replies = b""
        while replies.count(b"\r\n") < 3:
            chunk = sock.recv(4096)
            assert chunk, f"connection closed after {replies!r}"
            replies += chunk
        assert [line[:3] for line in replies.split(b"\r\n")[:3]] == [b"250", b"250", b"354"]
        sock.sendall(body + b".\r\n")
        assert _reply(sock).startswith(b"250")
    assert catcher.wait_for(1, timeout=10)
    [message] = catcher.received()
    assert (message.mail_from, message.rcpt) == ("news@example.org", "reader@example.com")
    assert lines in message.data
