"""What smtp/session.py takes over from aiosmtplib, checked against a real aiosmtpd server.

aiosmtplib opens the session (connect, EHLO, STARTTLS, AUTH); `SmtpSession._open` then takes
its connection for our own transaction transport (`_Replies`). That leans on aiosmtplib parts
that are not its documented API, which is why pyproject.toml pins aiosmtplib to the range these
tests passed on. Each test names the part it checks, so an upgrade that breaks one fails here
by name before it fails a broadcast:

- `SMTP.transport`: after connect() the connection's transport, and after starttls() the TLS
  transport (aiosmtplib reassigns it), not the TCP one under it; `SMTP.protocol` is that
  transport's protocol until we replace it with `transport.set_protocol()`;
- aiosmtplib has read nothing past the reply to its last command, keeps no hold on the
  connection once replaced (no event reaches it, dropping the SMTP object closes nothing),
  and leaves reading on: the next reply reaches our protocol;
- `SMTP.supports_extension()` with "pipelining" and "smtputf8", the EHLO keywords, after the
  second EHLO that STARTTLS calls for too;
- the errors `_open` turns into Replies: a refused AUTH and a refused greeting as
  `SMTPResponseException` with `.code` and `.message`, a refused connection as an
  `SMTPException` whose cause is the `ConnectionRefusedError`;
- `SMTPResponse(code, message)`, `SMTPResponseException(code, message)` and
  `SMTPServerDisconnected(message)` built positionally, as `_Replies` builds them;
- `aiosmtplib.email.quote_address()` for an address that is not bare (`_bracketed`).
"""

from __future__ import annotations

import asyncio
import gc
import socket
import ssl
from collections.abc import Iterator
from typing import Literal

import aiosmtplib
import pytest
import trustme
from aiosmtplib import SMTPResponse
from aiosmtplib.email import quote_address

from senddock.smtp.session import _Replies
from senddock.testing import Catcher

Tls = Literal["none", "starttls", "tls"]
USER, PASSWORD = "news", "s3cret"
BODY = b"From: news@example.org\r\nTo: a@example.com\r\nSubject: hand-over\r\n\r\nhello\r\n"


@pytest.fixture(params=["none", "starttls", "tls"])
def relay(request: pytest.FixtureRequest) -> Iterator[Catcher]:
    """An aiosmtpd server with AUTH, in plain text, with STARTTLS, or TLS from the first byte."""
    tls: Tls = request.param
    context = None
    if tls != "none":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        trustme.CA().issue_cert("127.0.0.1").configure_cert(context)
    with Catcher(user=USER, password=PASSWORD, tls=tls, tls_context=context) as server:
        yield server


def client(server: Catcher, timeout: float = 10) -> aiosmtplib.SMTP:
    """aiosmtplib's client, built with the arguments SmtpSession._open gives it."""
    return aiosmtplib.SMTP(
        hostname=server.host,
        port=server.port,
        use_tls=server.tls == "tls",
        start_tls=False,
        validate_certs=False,
        timeout=timeout,
        local_hostname=socket.gethostname(),
    )


async def opened(server: Catcher) -> aiosmtplib.SMTP:
    """Connect, EHLO, STARTTLS if offered, AUTH: the steps SmtpSession._open leaves to it."""
    smtp = client(server)
    await smtp.connect()
    await smtp.ehlo()
    if server.tls == "starttls":
        await smtp.starttls()
    await smtp.login(USER, PASSWORD)
    return smtp


async def test_an_open_session_hands_its_connection_over_and_keeps_no_hold(
    relay: Catcher,
) -> None:
    smtp = await opened(relay)
    transport = smtp.transport
    assert isinstance(transport, asyncio.Transport), transport
    assert not transport.is_closing()
    # After STARTTLS it must be the TLS transport: the TCP one under it carries ciphertext.
    assert (transport.get_extra_info("sslcontext") is not None) == (relay.tls != "none")
    assert transport.get_protocol() is smtp.protocol
    assert smtp.supports_extension("pipelining") and smtp.supports_extension("smtputf8")

    ours = _Replies(transport)
    transport.set_protocol(ours)
    del smtp
    gc.collect()  # aiosmtplib's objects gone: the connection must stay ours and open
    await asyncio.sleep(0.05)
    assert ours.idle, "a reply (or an end) arrived before any command of ours"

    assert (await ours.command(b"NOOP", 5)).code == 250
    ours.write(b"MAIL FROM:<news@example.org>\r\nRCPT TO:<a@example.com>\r\nDATA\r\n")
    codes = [(await ours.reply(5)).code for _ in range(3)]
    ours.write(BODY + b".\r\n")
    codes.append((await ours.reply(5)).code)
    assert codes == [250, 250, 354, 250]
    assert (await ours.command(b"QUIT", 5)).code == 221
    ours.transport.close()
    received = relay.received()
    assert [(r.rcpt, r.tls) for r in received] == [("a@example.com", relay.tls != "none")]


async def test_extensions_are_read_from_what_the_relay_offers(catcher: Catcher) -> None:
    catcher.pipelining = catcher.smtputf8 = False
    smtp = client(catcher)
    await smtp.connect()
    await smtp.ehlo()
    try:
        assert not smtp.supports_extension("pipelining")
        assert not smtp.supports_extension("smtputf8")
        assert smtp.supports_extension("8bitmime")  # the parse works: it is not always False
    finally:
        smtp.close()


async def test_refusals_while_opening_carry_their_code_and_text(catcher: Catcher) -> None:
    catcher.reject_auth = True
    smtp = client(catcher)
    await smtp.connect()
    await smtp.ehlo()
    with pytest.raises(aiosmtplib.SMTPResponseException) as refused:
        await smtp.login("someone", "wrong")
    smtp.close()
    assert (refused.value.code, refused.value.message) == (
        535,
        "5.7.8 Authentication credentials invalid",
    )

    catcher.reject_connect = True
    with pytest.raises(aiosmtplib.SMTPResponseException) as greeting:
        await client(catcher).connect()
    assert (greeting.value.code, greeting.value.message) == (554, "5.3.2 service not available")


async def test_a_refused_connection_is_an_smtp_error_caused_by_the_refusal() -> None:
    with socket.socket() as unused:  # a port nobody listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    smtp = aiosmtplib.SMTP(hostname="127.0.0.1", port=port, start_tls=False, timeout=5)
    with pytest.raises(aiosmtplib.SMTPException) as failed:
        await smtp.connect()
    cause = failed.value.__cause__ or failed.value.__context__
    assert isinstance(cause, ConnectionRefusedError), repr(failed.value)


def test_the_types_our_transport_builds_are_built_positionally() -> None:
    reply = SMTPResponse(250, "2.0.0 ok")
    assert (reply.code, reply.message) == (250, "2.0.0 ok")
    bad = aiosmtplib.SMTPResponseException(-1, "malformed reply")
    assert (bad.code, bad.message) == (-1, "malformed reply")
    assert isinstance(bad, aiosmtplib.SMTPException)
    lost = aiosmtplib.SMTPServerDisconnected("Connection lost")
    assert isinstance(lost, aiosmtplib.SMTPException) and str(lost) == "Connection lost"
    assert issubclass(aiosmtplib.SMTPTimeoutError, aiosmtplib.SMTPException)


def test_quote_address_brackets_the_address_of_a_named_one() -> None:
    assert quote_address("News <news@example.org>") == "<news@example.org>"
