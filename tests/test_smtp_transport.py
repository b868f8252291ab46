"""The SMTP transport (delivery/smtp.py) against a real server: what arrives, and when."""

from __future__ import annotations

from senddock.config import SmtpTarget
from senddock.delivery.smtp import HOLD_WHOLE_BODY, SmtpSession
from senddock.testing import Catcher

HEAD = b"From: news@example.org\r\nTo: reader@example.com\r\nSubject: dots\r\n\r\n"


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


async def test_leading_dots_and_bare_line_feeds_arrive_as_written(catcher: Catcher) -> None:
    body = HEAD + b".starts with a dot\nbare LF above\r\n..two dots\r\n.\r\nlast"
    data, held = await _send_held(catcher, body)
    assert held == [0]  # the hold ran before the server had the message
    expected = HEAD + b".starts with a dot\r\nbare LF above\r\n..two dots\r\n.\r\nlast\r\n"
    assert data == expected


async def test_a_body_larger_than_the_hold_arrives_whole_after_the_hold(catcher: Catcher) -> None:
    line = b"x" * 70 + b"\r\n"
    body = HEAD + line * (2 * HOLD_WHOLE_BODY // len(line)) + b".dot line\r\n"
    data, held = await _send_held(catcher, body)
    assert held == [0]
    assert data == body
