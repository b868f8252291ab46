"""The SMTP transport: one reusable session to the relay, each step named for the outcome rules.

`send()` never raises for an SMTP or network failure: it returns the Reply that ended the
attempt, tagged with the stage it happened at, so delivery/outcome.py can judge it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import ssl
from collections.abc import Awaitable, Callable

import aiosmtplib

from senddock.config import SmtpTarget
from senddock.delivery.outcome import Reply


class SmtpSession:
    """A connection to the relay that is opened lazily and reused until it fails."""

    def __init__(self, target: SmtpTarget, timeout: float, verify_certs: bool = True) -> None:
        self.target = target
        self.timeout = timeout
        self.verify_certs = verify_certs
        self._smtp: aiosmtplib.SMTP | None = None

    @property
    def connected(self) -> bool:
        return self._smtp is not None and self._smtp.is_connected

    async def open(self) -> Reply | None:
        """Open the session now unless it is open: None, or the Reply that ended the try.

        The worker opens before it waits for a rate-limit permit, so the permit is spent at
        MAIL FROM and not on a handshake.
        """
        return None if self.connected else await self._open()

    async def _open(self) -> Reply | None:
        """Connect, EHLO, STARTTLS and AUTH as the URL says; a Reply on failure, else None."""
        t = self.target
        smtp = aiosmtplib.SMTP(
            hostname=t.host,
            port=t.port,
            use_tls=t.tls == "tls",
            start_tls=False,
            validate_certs=self.verify_certs,
            timeout=self.timeout,
            local_hostname=socket.gethostname(),
        )
        stage = "connect"
        try:
            await smtp.connect()
            stage = "ehlo"
            await smtp.ehlo()
            if t.tls == "starttls":
                stage = "starttls"
                await smtp.starttls()
            if t.username:
                stage = "auth"
                await smtp.login(t.username, t.password or "")
        except aiosmtplib.SMTPResponseException as exc:
            smtp.close()
            return Reply(stage, exc.code, exc.message)
        except (TimeoutError, aiosmtplib.SMTPException, OSError, ssl.SSLError) as exc:
            smtp.close()
            return Reply(stage, None, _describe(exc))
        self._smtp = smtp
        return None

    async def send(
        self,
        sender: str,
        recipient: str,
        message: bytes,
        before_dot: Callable[[], Awaitable[None]] | None = None,
    ) -> Reply:
        """One message to one recipient; the Reply says how it ended (250 at data = sent).

        With `before_dot`, the envelope and the whole body go out at once, and only the final
        dot, which makes the server accept, waits for `before_dot()` (invariant 3).
        """
        if not self.connected:
            failed = await self._open()
            if failed is not None:
                return failed
        smtp = self._smtp
        assert smtp is not None
        stage = "mail"
        try:
            await smtp.mail(sender)
            stage = "rcpt"
            await smtp.rcpt(recipient)
            stage = "data"
            if before_dot is None:
                resp = await smtp.data(message)
            else:
                resp = await _data_held(smtp, message, before_dot)
            return Reply("data", resp.code, resp.message)
        except aiosmtplib.SMTPResponseException as exc:
            reply = Reply(stage, exc.code, exc.message)
            if exc.code == 421 or not smtp.is_connected:
                self.close()
            else:
                await self._reset()
            return reply
        except (TimeoutError, aiosmtplib.SMTPException, OSError) as exc:
            self.close()
            return Reply(stage, None, _describe(exc))

    async def _reset(self) -> None:
        """RSET after a refused step so the session can carry the next message."""
        if self._smtp is None:
            return
        try:
            await self._smtp.rset()
        except (TimeoutError, aiosmtplib.SMTPException, OSError):
            self.close()

    async def quit(self) -> None:
        if self._smtp is not None and self._smtp.is_connected:
            with contextlib.suppress(aiosmtplib.SMTPException, OSError, TimeoutError):
                await asyncio.wait_for(self._smtp.quit(), 5)
        self.close()

    def close(self) -> None:
        if self._smtp is not None:
            self._smtp.close()
        self._smtp = None


async def _data_held(
    smtp: aiosmtplib.SMTP, message: bytes, before_dot: Callable[[], Awaitable[None]]
) -> aiosmtplib.SMTPResponse:
    """DATA, the dot-stuffed body, then `before_dot()`, then the final dot alone (RFC 5321)."""
    start = await smtp.execute_command(b"DATA")
    if start.code != 354:
        raise aiosmtplib.SMTPDataError(start.code, start.message)
    if smtp.protocol is None:
        raise aiosmtplib.SMTPServerDisconnected("Connection lost")
    smtp.protocol.write(_stuffed(message))
    await before_dot()
    # The end-of-data line is ".", sent and answered as a command of its own.
    done = await smtp.execute_command(b".")
    if done.code != 250:
        raise aiosmtplib.SMTPDataError(done.code, done.message)
    return done


_BARE_LF = re.compile(rb"(?<!\r)\n")
_LEADING_DOT = re.compile(rb"(?m)^\.")


def _stuffed(message: bytes) -> bytes:
    """The body as DATA carries it: CRLF line ends, leading dots doubled, ending in CRLF."""
    body = _LEADING_DOT.sub(b"..", _BARE_LF.sub(b"\r\n", message))
    return body if body.endswith(b"\r\n") else body + b"\r\n"


def _describe(exc: BaseException) -> str:
    """A one-line description of a network failure, naming DNS, refusal, reset or timeout."""
    cause = exc.__cause__ or exc.__context__
    for e in (exc, cause):
        if isinstance(e, socket.gaierror):
            return f"DNS failure: {e}"
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, ConnectionResetError):
            return "connection reset"
        if isinstance(e, TimeoutError | asyncio.TimeoutError | aiosmtplib.SMTPTimeoutError):
            return "timeout"
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())
