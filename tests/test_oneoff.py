"""One-off messages (test sends, confirmation requests) go out through delivery/oneoff.py only,
over the relays of SENDDOCK_SMTP_URL, counted at real SMTP servers (issue 36, item 5)."""

from __future__ import annotations

from senddock.config import Settings
from senddock.delivery import oneoff
from senddock.messages import OneOff
from senddock.testing import Catcher
from web_support import free_port

MESSAGE = b"From: n@example.org\r\nTo: ada@example.com\r\nSubject: hi\r\n\r\nhello\r\n"


def one(to: str) -> OneOff:
    return OneOff(about=to, sender="n@example.org", recipient=to, data=MESSAGE)


def test_a_one_off_goes_to_the_next_relay_when_the_first_cannot_be_reached(
    catcher: Catcher,
) -> None:
    """Fails with the fall-over removed from oneoff._send (everything went to the first relay,
    as the two copies in optin.py and trial.py did): the reply is a connect failure and the
    second relay receives nothing."""
    down = f"smtp://127.0.0.1:{free_port()}?tls=none"  # nobody listens there
    settings = Settings(smtp_url=f"{down} {catcher.url}", smtp_timeout=5)
    replies = oneoff.send(settings, [one("ada@example.com"), one("bob@example.com")])
    assert [(about, r.accepted) for about, r in replies] == [
        ("ada@example.com", True),
        ("bob@example.com", True),
    ]
    assert [r.rcpt for r in catcher.received()] == ["ada@example.com", "bob@example.com"]


def test_one_offs_go_to_the_first_relay_while_it_answers() -> None:
    with Catcher() as first, Catcher() as second:
        settings = Settings(smtp_url=f"{first.url}, {second.url}")
        replies = oneoff.send(settings, [one("ada@example.com"), one("bob@example.com")])
        assert all(r.accepted for _, r in replies)
        assert [r.rcpt for r in first.received()] == ["ada@example.com", "bob@example.com"]
        assert second.received() == []


def test_with_no_relay_reachable_the_reply_says_so_and_nothing_raises() -> None:
    settings = Settings(smtp_url=f"smtp://127.0.0.1:{free_port()}?tls=none", smtp_timeout=5)
    [(about, reply)] = oneoff.send(settings, [one("ada@example.com")])
    assert about == "ada@example.com"
    assert not reply.accepted and reply.stage == "connect"
