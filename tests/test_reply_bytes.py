"""Replies whose text Postgres cannot store: bytes that are not UTF-8, and NUL.

A relay's reply text is kept with each job (`last_reply`), with a suppression (`detail`) and
with a sender fault (`last_sender_fault`). Some relays answer in Latin-1 or echo raw bytes; a
reply Postgres refuses must not stop the outcomes around it from being written, nor the
broadcast from finishing. A real worker against a relay speaking SMTP from a raw socket, since
aiosmtpd only sends text it can encode.
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from senddock.campaigns import status
from support import Conn, ThreadWorker, jobs, send_campaign, unfinished, wait_until

# Latin-1 e-acute, as a French relay might say "queued" or "unknown user"; and a NUL.
LATIN1 = b"\xe9"
NUL = b"\x00"


class _Relay(socketserver.StreamRequestHandler):
    """SMTP with PIPELINING, one line at a time; RCPT to `bounce@...` gets a 550, and every
    final dot and every 550 carries the server's `odd` bytes."""

    server: _Server

    def say(self, line: bytes) -> None:
        self.wfile.write(line + b"\r\n")

    def handle(self) -> None:
        odd = self.server.odd
        self.say(b"220 raw.example ESMTP")
        recipients = 0
        while line := self.rfile.readline():
            verb = line[:4].upper()
            if verb in (b"EHLO", b"HELO"):
                self.say(b"250-raw.example\r\n250-PIPELINING\r\n250 8BITMIME")
            elif verb == b"MAIL":
                recipients = 0
                self.say(b"250 2.1.0 Ok")
            elif verb == b"RCPT":
                if b"bounce@" in line.lower():
                    self.say(b"550 5.1.1 destinataire inconnu " + odd)
                else:
                    recipients += 1
                    self.say(b"250 2.1.5 Ok")
            elif verb == b"DATA" and not recipients:
                self.say(b"554 5.5.1 Error: no valid recipients")
            elif verb == b"DATA":
                self.say(b"354 End data with <CR><LF>.<CR><LF>")
                while (body := self.rfile.readline()) and body != b".\r\n":
                    pass
                if not body:
                    return
                with self.server.lock:
                    self.server.accepted += 1
                self.say(b"250 2.0.0 Ok: mis en file " + odd)
            elif verb == b"RSET":
                recipients = 0
                self.say(b"250 2.0.0 Ok")
            elif verb == b"QUIT":
                self.say(b"221 2.0.0 Bye")
                return
            else:
                self.say(b"502 5.5.2 Error: command not recognized")


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, odd: bytes) -> None:
        super().__init__(("127.0.0.1", 0), _Relay)
        self.odd = odd
        self.accepted = 0
        self.lock = threading.Lock()


@pytest.fixture(params=[LATIN1, NUL], ids=["latin-1", "nul"])
def relay(request: pytest.FixtureRequest) -> Iterator[_Server]:
    server = _Server(request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_replies_postgres_cannot_store_are_kept_readable_and_the_broadcast_finishes(
    conn: Conn, db_url: str, relay: _Server
) -> None:
    emails = [f"r{i}@example.com" for i in range(12)] + ["bounce@example.com"]
    cid, bid = send_campaign(conn, "news", emails)
    host, port = relay.server_address[:2]
    assert isinstance(host, str)
    with ThreadWorker(db_url, f"smtp://{host}:{port}", concurrency=3):
        finished = wait_until(lambda: unfinished(conn, bid) == 0, timeout=30)
    assert finished, jobs(conn, bid)
    rows = jobs(conn, bid)
    assert relay.accepted == 12  # each good address once; the bounce never reached DATA
    for address in emails[:-1]:
        row = rows[address]
        assert (row["status"], row["last_code"]) == ("sent", 250), row
        # The text as the relay meant it, the byte Postgres cannot hold replaced or dropped.
        assert row["last_reply"].rstrip() in (
            "2.0.0 Ok: mis en file \ufffd",
            "2.0.0 Ok: mis en file",
        )
    bounced = rows["bounce@example.com"]
    assert (bounced["status"], bounced["failure"], bounced["last_code"]) == (
        "failed",
        "bounced",
        550,
    )
    detail = conn.execute(
        "SELECT detail FROM suppressions WHERE lower(email) = 'bounce@example.com'"
    ).fetchone()
    assert detail is not None
    assert str(detail["detail"]).startswith("5.1.1 destinataire inconnu")
    st = status(conn, cid)
    assert (st.status, st.counts.sent, st.counts.failed) == ("sent", 12, 1)


def test_the_relay_really_sends_the_bytes(relay: _Server) -> None:
    """The relay above is what it says: its replies hold the byte as sent."""
    host, port = relay.server_address[:2]
    assert isinstance(host, str)
    with socket.create_connection((host, port), timeout=5) as s:
        f = s.makefile("rwb")
        assert f.readline().startswith(b"220")
        f.write(b"EHLO t\r\nMAIL FROM:<a@b.c>\r\nRCPT TO:<bounce@b.c>\r\nQUIT\r\n")
        f.flush()
        replies = [f.readline() for _ in range(6)]
    assert replies[4] == b"550 5.1.1 destinataire inconnu " + relay.odd + b"\r\n"
