"""The SMTP transport (smtp/session.py) against a real server: what arrives, and when.

Each test runs with the server offering PIPELINING (MAIL, RCPT and DATA in one write) and
without it (one command at a time).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Literal, cast

import pytest
import trustme
from aiosmtplib.email import quote_address

from senddock.config import SmtpTarget
from senddock.delivery.outcome import Reply, Verdict, judge
from senddock.smtp.session import AHEAD_WINDOW, HOLD_WHOLE_BODY, SmtpSession, _bracketed
from senddock.testing import Catcher

HEAD = b"From: news@example.org\r\nTo: reader@example.com\r\nSubject: dots\r\n\r\n"
BODY = HEAD + b"hello\r\n"


SENDER = "news@example.org"


def _then(envelope: tuple[str, str] | None) -> Callable[[], tuple[str, str] | None]:
    """`send()`'s `then`: the next message's (sender, recipient), decided in advance."""
    return lambda: envelope


async def _send_each(session: SmtpSession, order: list[str], ahead: bool = True) -> list[Reply]:
    """BODY to each recipient in turn, each send naming the next as `then` (with `ahead`);
    the session quits at the end."""
    nexts = [*((SENDER, r) if ahead else None for r in order[1:]), None]
    try:
        return [
            await session.send(SENDER, rcpt, BODY, then=_then(n))
            for rcpt, n in zip(order, nexts, strict=True)
        ]
    finally:
        await session.quit()


@contextlib.asynccontextmanager
async def _serving(protocol: Callable[[], asyncio.Protocol]) -> AsyncIterator[SmtpSession]:
    """A server of our own on 127.0.0.1, and a session to it that sends envelopes ahead."""
    server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        target = SmtpTarget.parse(f"smtp://127.0.0.1:{port}?tls=none")
        yield SmtpSession(target, timeout=5, ahead_min_rtt=0.0)


class _Scripted(asyncio.Protocol):
    """A server of our own, a line at a time: it offers PIPELINING, says 250 to every command,
    354 to DATA, and `dot()` answers each final dot; `buffer` holds what came after the line
    being answered, in the same read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.buffer = b""
        self.in_data = False
        self.dots = 0
        self.lines: list[bytes] = []
        self.transport.write(b"220 scripted.test ESMTP\r\n")

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n" in self.buffer and not self.transport.is_closing():
            line, self.buffer = self.buffer.split(b"\r\n", 1)
            self.lines.append(line)
            self.transport.write(self.answer(line))

    def answer(self, line: bytes) -> bytes:
        if self.in_data:
            if line != b".":
                return b""
            self.in_data = False
            self.dots += 1
            return self.dot()
        verb = line[:4].upper()
        if verb == b"EHLO":
            return b"250-scripted.test\r\n250 PIPELINING\r\n"
        if verb == b"DATA":
            self.in_data = True
            return b"354 go on\r\n"
        if verb == b"QUIT":
            self.transport.close()
            return b"221 2.0.0 bye\r\n"
        return b"250 2.1.0 ok\r\n"

    def dot(self) -> bytes:
        return b"250 2.0.0 queued\r\n"


@pytest.fixture(params=[True, False], ids=["pipelining", "one-by-one"])
def server(request: pytest.FixtureRequest, catcher: Catcher) -> Catcher:
    catcher.pipelining = request.param
    return catcher


async def _send_held(catcher: Catcher, body: bytes) -> tuple[bytes, list[int]]:
    """Send `body` with a held dot; what arrived, and the server's count when the hold ran."""
    session = SmtpSession(SmtpTarget.parse(catcher.url), timeout=10)
    seen_at_hold: list[int] = []

    async def before_dot() -> None:
        seen_at_hold.append(catcher.received_count())

    try:
        reply = await session.send("news@example.org", "reader@example.com", body, before_dot)
    finally:
        await session.quit()
    assert reply.code == 250, reply
    assert catcher.wait_for(1)
    return catcher.received()[0].data, seen_at_hold


async def test_leading_dots_and_bare_line_feeds_arrive_as_written(server: Catcher) -> None:
    body = HEAD + b".starts with a dot\nbare LF above\r\n..two dots\r\n.\r\nlast"
    data, held = await _send_held(server, body)
    assert held == [0]  # the hold ran before the server had the message
    assert data == HEAD + b".starts with a dot\r\nbare LF above\r\n..two dots\r\n.\r\nlast\r\n"


async def test_a_body_larger_than_the_hold_arrives_whole_after_the_hold(server: Catcher) -> None:
    line = b"x" * 70 + b"\r\n"
    body = HEAD + line * (2 * HOLD_WHOLE_BODY // len(line)) + b".dot line\r\n"
    data, held = await _send_held(server, body)
    assert held == [0]
    assert data == body


@pytest.mark.parametrize("ahead", [False, True], ids=["own-envelope", "envelope-ahead"])
async def test_refusals_name_their_stage_and_the_session_carries_on(
    server: Catcher, ahead: bool
) -> None:
    """A refused RCPT, deferred DATA and RCPT, a drop after the data, between good messages:
    every reply is charged to its stage, and each good message arrives once. With each next
    envelope sent ahead with the final dot, too: the replies land on the same messages."""
    session = SmtpSession(SmtpTarget.parse(server.url), timeout=10, ahead_min_rtt=0.0)
    order = [
        "a@example.com",
        "bounce-b@example.com",
        "c@example.com",
        "flakydata-d@example.com",
        "e@example.com",
        "drop-f@example.com",
        "g@example.com",
        "flaky-h@example.com",
        "i@example.com",
    ]
    replies = await _send_each(session, order, ahead)
    got = {rcpt: (r.stage, r.code) for rcpt, r in zip(order, replies, strict=True)}
    assert got == {
        "a@example.com": ("data", 250),
        "bounce-b@example.com": ("rcpt", 550),
        "c@example.com": ("data", 250),
        "flakydata-d@example.com": ("data", 451),
        "e@example.com": ("data", 250),
        "drop-f@example.com": ("dot", None),  # after the final dot: RFC 1047
        "g@example.com": ("data", 250),
        "flaky-h@example.com": ("rcpt", 451),
        "i@example.com": ("data", 250),
    }
    assert server.delivered_once([r for r in order if "-" not in r.split("@")[0]])
    assert server.connections == 2  # the drop cost one new connection; refusals none


async def test_the_next_envelope_goes_in_the_same_write_as_the_final_dot() -> None:
    """A server of our own answers a final dot, but the last, only if the next MAIL came with
    it in the same read, and 451 otherwise: every message is accepted only if each envelope
    went out with the dot before it."""
    n = 5
    ahead = 0

    class Strict(_Scripted):
        def dot(self) -> bytes:
            nonlocal ahead
            if self.buffer.startswith(b"MAIL FROM:"):
                ahead += 1
            elif self.dots < n:
                return b"451 4.3.0 no envelope came with the dot\r\n"
            return super().dot()

    async with _serving(Strict) as session:
        replies = await _send_each(session, [f"r{i}@example.com" for i in range(n)])
    assert [(r.stage, r.code) for r in replies] == [("data", 250)] * n
    assert ahead == n - 1


async def test_a_session_that_ends_before_answering_an_envelope_sent_ahead_is_replaced() -> None:
    """The server takes the first message and hangs up without answering the envelope that
    came with its dot (as a relay restarting would): the second message goes on a new session,
    its envelope sent again, and is accepted there; nothing is charged to it."""
    connections: list[list[bytes]] = []

    class Once(_Scripted):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            connections.append(self.lines)

        def dot(self) -> bytes:
            if len(connections) == 1:  # the first session: accept, then go away unasked
                self.buffer = b""
                asyncio.get_running_loop().call_later(0.05, self.transport.close)
            return super().dot()

    async with _serving(Once) as session:
        replies = await _send_each(session, ["a@example.com", "b@x.test"])
    assert [(r.stage, r.code) for r in replies] == [("data", 250)] * 2
    assert len(connections) == 2
    # The second session carried b's whole transaction, its envelope written anew.
    assert connections[1][1:4] == [b"MAIL FROM:<news@example.org>", b"RCPT TO:<b@x.test>", b"DATA"]


async def test_an_envelope_sent_ahead_is_never_ended_for_another_message(catcher: Catcher) -> None:
    """The next envelope went with the dot, then another message (or none) came instead: the
    session hangs up on that envelope's DATA rather than end it, and no one gets a message
    that was not sent to them."""
    session = SmtpSession(SmtpTarget.parse(catcher.url), timeout=10, ahead_min_rtt=0.0)
    sender = SENDER
    try:
        a = await session.send(sender, "a@example.com", BODY, then=_then((sender, "b@x.test")))
        c = await session.send(sender, "c@example.com", BODY)  # not b
        d = await session.send(sender, "d@example.com", BODY, then=_then((sender, "e@x.test")))
    finally:
        await session.quit()  # e's envelope went ahead; nothing follows
    assert [(r.stage, r.code) for r in (a, c, d)] == [("data", 250)] * 3
    assert catcher.delivered_once(["a@example.com", "c@example.com", "d@example.com"])
    assert catcher.dots_with_more == 2  # a's and d's dots carried an envelope
    assert catcher.connections == 2  # b's envelope cost its connection


async def test_an_envelope_sent_ahead_is_hung_up_on_before_its_replies_came() -> None:
    """As a far relay would, the server holds its replies to the envelope that came with the
    first dot: the next send, for another recipient, finds nothing unasked on the session and
    must still hang up, or its commands would be read as that envelope's message."""
    delivered: list[bytes] = []
    sessions = 0

    class Late(_Scripted):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            nonlocal sessions
            super().connection_made(transport)
            sessions += 1
            self.first = sessions == 1
            self.held: list[bytes] = []

        def answer(self, line: bytes) -> bytes:
            command = not self.in_data
            reply = super().answer(line)
            if command and line.startswith(b"RCPT TO:"):
                self.rcpt = line[8:]
            if self.first and self.dots and command:
                self.held.append(reply)  # after the first dot: answered half a second late
                if len(self.held) == 1:
                    asyncio.get_running_loop().call_later(0.5, self.release)
                return b""
            return reply

        def release(self) -> None:
            if not self.transport.is_closing():
                self.transport.write(b"".join(self.held))

        def dot(self) -> bytes:
            delivered.append(self.rcpt)
            return super().dot()

    async with _serving(Late) as session:
        try:
            a = await session.send(SENDER, "a@example.com", BODY, then=_then((SENDER, "b@x.test")))
            c = await session.send(SENDER, "c@example.com", BODY)  # not b
        finally:
            await session.quit()
    assert [(r.stage, r.code) for r in (a, c)] == [("data", 250)] * 2
    assert delivered == [b"<a@example.com>", b"<c@example.com>"]
    assert sessions == 2


@pytest.mark.parametrize("dot_ms", [0, 5])
async def test_envelopes_go_ahead_only_to_a_relay_a_millisecond_or_more_away(
    catcher: Catcher, dot_ms: int
) -> None:
    """To a relay that answers at once (127.0.0.1) each envelope waits for the dot's reply; to
    one 5 ms slow to answer a dot, once AHEAD_WINDOW dots showed it, each goes with the dot
    before it."""
    n = AHEAD_WINDOW + 10
    order = [f"r{i}@example.com" for i in range(n)]
    catcher.dot_delay = dot_ms / 1000
    session = SmtpSession(SmtpTarget.parse(catcher.url), timeout=10)
    codes = [r.code for r in await _send_each(session, order)]
    assert codes == [250] * n
    assert catcher.delivered_once(order)
    if dot_ms:
        assert session.far
        # The window fills with the first AHEAD_WINDOW dots; all but the last after them.
        assert catcher.dots_with_more >= n - AHEAD_WINDOW - 3
    else:
        assert not session.far
        assert catcher.dots_with_more == 0


async def test_a_refused_sender_is_charged_to_mail(server: Catcher) -> None:
    server.reject_mail_from = True
    session = SmtpSession(SmtpTarget.parse(server.url), timeout=10)
    try:
        first = await session.send("news@example.org", "a@example.com", BODY)
        server.reject_mail_from = None
        second = await session.send("news@example.org", "b@example.com", BODY)
    finally:
        await session.quit()
    assert (first.stage, first.code is not None and 500 <= first.code < 600) == ("mail", True)
    assert (second.stage, second.code) == ("data", 250)
    assert server.delivered_once(["b@example.com"])


async def test_sessions_side_by_side_each_deliver_their_own(server: Catcher) -> None:
    emails = [f"r{i}@example.com" for i in range(200)]

    async def one(share: list[str]) -> list[int | None]:
        session = SmtpSession(SmtpTarget.parse(server.url), timeout=10)
        try:
            return [(await session.send("news@example.org", e, BODY)).code for e in share]
        finally:
            await session.quit()

    codes = await asyncio.gather(*(one(emails[i::5]) for i in range(5)))
    assert all(c == 250 for share in codes for c in share)
    assert server.delivered_once(emails)


@pytest.mark.parametrize("tls", ["starttls", "tls"])
async def test_over_tls_the_session_sends_many_and_carries_on_after_a_refusal(
    tls: Literal["starttls", "tls"],
) -> None:
    """The transactions take over a TLS connection (STARTTLS or TLS from the first byte)."""
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    with Catcher(tls=tls, tls_context=context, user="news", password="s3cret") as server:
        session = SmtpSession(SmtpTarget.parse(server.url), timeout=10, verify_certs=False)
        order = ["a@example.com", "bounce-b@example.com", "c@example.com"]
        try:
            replies = [await session.send("news@example.org", r, BODY) for r in order]
        finally:
            await session.quit()
        assert [(r.stage, r.code) for r in replies] == [("data", 250), ("rcpt", 550), ("data", 250)]
        assert server.delivered_once(["a@example.com", "c@example.com"])
        assert all(r.tls for r in server.received())
        assert server.connections == 1


@pytest.mark.parametrize(
    "address",
    ["a@b.c", "x.y+tag@sub.example.co.uk", "News <news@example.org>", '"odd one"@example.com'],
)
def test_a_bare_address_is_bracketed_as_aiosmtplib_would(address: str) -> None:
    assert _bracketed(address) == quote_address(address).encode()


@pytest.mark.parametrize("smtputf8", [True, False], ids=["smtputf8", "ascii-only"])
async def test_a_non_ascii_address_needs_smtputf8_else_fails_without_a_bounce(
    server: Catcher, smtputf8: bool
) -> None:
    server.smtputf8 = smtputf8
    session = SmtpSession(SmtpTarget.parse(server.url), timeout=10)
    try:
        reply = await session.send("news@example.org", "jürgen@example.com", BODY)
        after = await session.send("news@example.org", "plain@example.com", BODY)
    finally:
        await session.quit()
    assert after.code == 250
    if smtputf8:
        assert (reply.stage, reply.code) == ("data", 250)
        assert server.delivered_once(["jürgen@example.com", "plain@example.com"])
    else:
        assert (reply.stage, reply.code, reply.enhanced) == ("rcpt", 553, "5.6.7")
        assert judge(reply) is Verdict.REJECTED  # failed, never suppressed
        assert server.delivered_once(["plain@example.com"])


async def test_replies_cut_anywhere_and_multi_line_replies_are_read_whole() -> None:
    """A server of our own that writes its replies a few bytes at a time, and answers the
    final dot with a multi-line 250: each reply is read whole, in order."""
    lines: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async def say(text: bytes) -> None:
            for i in range(0, len(text), 3):  # three bytes per segment
                writer.write(text[i : i + 3])
                await writer.drain()
                await asyncio.sleep(0)

        await say(b"220 odd.test ESMTP\r\n")
        while line := await reader.readline():
            lines.append(line)
            verb = line[:4].upper()
            if verb == b"EHLO":
                await say(b"250-odd.test\r\n250-PIPELINING\r\n250 8BITMIME\r\n")
            elif verb == b"DATA":
                await say(b"354 go on\r\n")
                while (body := await reader.readline()) != b".\r\n":
                    if not body:
                        return
                await say(b"250-2.0.0 queued\r\n250-as 1234\r\n250 2.0.0 bye for now\r\n")
            elif verb == b"QUIT":
                await say(b"221 2.0.0 bye\r\n")
                break
            else:
                await say(b"250 2.1.0 ok\r\n")
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        session = SmtpSession(SmtpTarget.parse(f"smtp://127.0.0.1:{port}?tls=none"), timeout=5)
        try:
            replies = [await session.send("news@example.org", rcpt, BODY) for rcpt in "ab"]
        finally:
            await session.quit()
    assert [(r.stage, r.code, r.text) for r in replies] == [
        ("data", 250, "2.0.0 queued\nas 1234\n2.0.0 bye for now")
    ] * 2
    verbs = [line.split(b":")[0].split()[0] for line in lines]
    assert verbs == [b"EHLO", *[b"MAIL", b"RCPT", b"DATA"] * 2, b"QUIT"]


@pytest.mark.parametrize(
    ("sender", "recipient", "stage", "verdict"),
    [
        ("jürgen@example.org", "plain@example.com", "mail", Verdict.SENDER_FAULT),
        ("news@example.org", "bad\r\nRCPT TO:<x@example.com>", "rcpt", Verdict.REJECTED),
        ("news@example.org\r\nRSET", "plain@example.com", "mail", Verdict.SENDER_FAULT),
    ],
)
async def test_an_address_refused_here_blames_the_sender_or_rejects_never_bounces(
    server: Catcher, sender: str, recipient: str, stage: str, verdict: Verdict
) -> None:
    """An envelope we refuse to send: a bad sender is about us (it must never suppress a
    subscriber, invariant 6); a bad recipient is rejected, not bounced; nothing goes out."""
    server.smtputf8 = False
    session = SmtpSession(SmtpTarget.parse(server.url), timeout=10)
    try:
        reply = await session.send(sender, recipient, BODY)
        after = await session.send("news@example.org", "plain@example.com", BODY)
    finally:
        await session.quit()
    assert (reply.stage, reply.code) == (stage, 553)
    assert judge(reply) is verdict
    assert after.code == 250
    assert server.delivered_once(["plain@example.com"])
