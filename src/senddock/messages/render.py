"""Compile a campaign's templates once, then render each recipient straight to message bytes.

Building an `EmailMessage` per recipient costs ~2 ms; this writes the few headers and the
quoted-printable bodies directly, which is what keeps per-message work small.
"""

from __future__ import annotations

import email.policy
import email.utils
import functools
import quopri
import re
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.errors import NonASCIILocalPartDefect
from email.header import Header
from types import TracebackType
from typing import Any

import idna
from jinja2 import ChainableUndefined, TemplateError, TemplateSyntaxError, UndefinedError, meta
from jinja2.exceptions import SecurityError
from jinja2.runtime import Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from senddock.errors import Invalid
from senddock.messages.html_text import html_to_text
from senddock.messages.links import Links, Unsubscribe
from senddock.messages.sandbox import (
    HARD_SECONDS,
    RenderStopped,
    Sandbox,
    limits,
)
from senddock.messages.tracking import Tracker

_TEXT_ENV = Sandbox(autoescape=False, keep_trailing_newline=True)
_HTML_ENV = Sandbox(autoescape=True, keep_trailing_newline=True)


class TemplateProblem(Invalid, ValueError):
    """A template that cannot render; says which part and which line (422, about its part's
    field)."""


# The input field each part of a message comes from (what an API client or a form sent).
PART_FIELDS = {"subject": "subject", "text": "text_body", "html": "html_body"}


# A body larger than this is refused at create: mail providers clip or reject such messages
# long before (Gmail clips HTML past ~100 kB), and every recipient would cost it again.
MAX_BODY = 2 * 1024 * 1024


class HeaderError(Invalid, ValueError):
    """A header value that would break the message (CR or LF in it); 422."""


def check_header(name: str, value: str, field: str | None) -> str:
    """Refuse CR and LF in a header value: they would let a value inject headers. `field` is
    the input the value came in, named by the HeaderError."""
    if "\r" in value or "\n" in value:
        raise HeaderError(f"{name} must not contain CR or LF", field=field)
    return value


@dataclass(frozen=True)
class Recipient:
    email: str
    name: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    # The subscriber's id: what the unsubscribe link names. None: no link (a test send).
    subscriber_id: int | None = None


def _compile(env: ImmutableSandboxedEnvironment, part: str, source: str) -> Any:
    try:
        template: Any = env.from_string(source)
    except TemplateSyntaxError as exc:
        raise TemplateProblem(
            f"{part} template, line {exc.lineno}: {exc.message}", field=PART_FIELDS[part]
        ) from exc
    template.senddock_part = part
    # The names it reads from the context (a signed link is made only for a template that
    # shows it): parsed once more, at compile time only.
    template.senddock_names = frozenset(meta.find_undeclared_variables(env.parse(source)))
    return template


def template_line(tb: TracebackType | None) -> int | None:
    """The template line a render error happened on (Jinja maps its frames to it)."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _problem(template: Any, exc: BaseException, what: str) -> TemplateProblem:
    line = template_line(exc.__traceback__)
    where = f"{template.senddock_part} template" + (f", line {line}" if line else "")
    return TemplateProblem(f"{where}: {what}", field=PART_FIELDS[template.senddock_part])


_STOPPED = f"rendering took longer than {HARD_SECONDS:g} s"


def render_limited(template: Any, ctx: dict[str, Any]) -> str:
    """Render a template of the sandbox within its limits (messages/sandbox.py) inside the
    caller's `limits()`; a stop from outside, a recursion or a failed allocation becomes the
    SecurityError that names it."""
    try:
        return str(template.render(ctx))
    except RenderStopped as exc:
        raise SecurityError(_STOPPED) from exc
    except RecursionError as exc:
        raise SecurityError("macros or loops nested too deeply (a recursive macro?)") from exc
    except MemoryError as exc:  # a limit we lack; the allocation that failed is gone
        raise SecurityError("the template needed too much memory") from exc


def _render(template: Any, ctx: dict[str, Any]) -> str:
    """One part of a message (inside `_parts`' limits), or the TemplateProblem naming it."""
    try:
        return render_limited(template, ctx)
    except TemplateError as exc:
        raise _problem(template, exc, str(exc)) from exc
    except (ArithmeticError, LookupError, TypeError, ValueError) as exc:
        raise _problem(template, exc, f"{type(exc).__name__}: {exc}") from exc


def _encode_header(value: str) -> str:
    if value.isascii() and len(value) <= _FOLD_AT:
        return value
    return Header(value, "utf-8").encode(linesep="\r\n")


def _format_from(from_addr: str) -> str:
    name, addr = email.utils.parseaddr(from_addr)
    return email.utils.formataddr((name, addr), charset="utf-8") if name else addr


def address_count(value: str) -> int:
    """How many addresses a From header value names ('"Doe, J" <j@x.org>' is one)."""
    return len([a for _, a in email.utils.getaddresses([value]) if a])


def one_mailbox(what: str, value: str, field: str) -> str:
    """The bare address of a From or Reply-To value that names exactly one mailbox
    (`addr` or `Name <addr>`); else HeaderError about `field`. Read twice, by the lenient
    parser that makes the header (parseaddr keeps the first of several and drops the rest
    unsaid) and by the standard library's RFC 5322 header parser, and refused when either
    sees more than one mailbox, a group, or anything left over (issue 35.7: a confirmation
    went out `From: News <news@…>, evil@attacker.test`)."""
    check_header(what, value, field)
    parsed = email.policy.default.header_factory(what, value)
    mailboxes = [a for g in parsed.groups for a in g.addresses]
    if (
        address_count(value) > 1
        or len(mailboxes) > 1
        or any(g.display_name is not None for g in parsed.groups)
        or value.strip().endswith((",", ";"))
    ):
        raise HeaderError(f"{what} names several addresses ({value!r}): give one", field=field)
    _, addr = email.utils.parseaddr(value)
    # A UTF-8 local part is ours to send (SMTPUTF8, RFC 6532), not a defect of the value.
    defects = [d for d in parsed.defects if not isinstance(d, NonASCIILocalPartDefect)]
    if "@" not in addr or " " in addr or defects or len(mailboxes) != 1:
        raise HeaderError(
            f'{what} {value!r} is not one email address (e.g. "News <news@example.org>")',
            field=field,
        )
    if mailboxes[0].addr_spec != addr:  # the two parsers disagree: trust neither
        raise HeaderError(f"{what} {value!r} is ambiguous: give one address", field=field)
    return addr


def _address_header(what: str, value: str, field: str) -> tuple[str, str]:
    """(header value, bare address) of a `Name <addr>` value naming one mailbox
    (`one_mailbox`)."""
    addr = one_mailbox(what, value, field)
    return _format_from(value), addr


def _one_line(value: str) -> str:
    """A value from a subscriber's data, made safe for a header (no CR, LF or runs of space)."""
    return " ".join(value.split())


# A subscriber's name in To is a courtesy: past this many characters it is cut (a header line
# longer than 998 octets is refused by some relays, which would count against the broadcast).
MAX_NAME = 200
# A subject is cut here (a subscriber's 200 KB name in it took 0.4 s to encode, every message;
# mail clients show a few dozen characters).
MAX_SUBJECT = 998
# An ASCII header value longer than this is folded as encoded words (RFC 2047), which can be.
_FOLD_AT = 900
# What a display name must be quoted for (RFC 5322 specials, besides the atext it may hold).
_SPECIALS = re.compile(r'[()<>\[\]:;@\\,."]')


class AddressProblem(ValueError):
    """A recipient address that cannot be written into a message (no such IDNA domain...)."""


@functools.lru_cache(maxsize=4096)
def ascii_domain(domain: str) -> str:
    """The domain as DNS and an ASCII-only relay take it: IDNA A-labels (RFC 5891)."""
    if domain.isascii():
        return domain
    try:
        return idna.encode(domain, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError) as exc:
        raise AddressProblem(f"the domain {domain!r} has no IDNA form: {exc}") from exc


def wire_address(address: str) -> str:
    """The address as it goes on the wire: an IDNA domain in A-labels; a non-ASCII local part
    stays as it is, which only a relay that offers SMTPUTF8 (RFC 6531) can take."""
    if address.isascii():
        return address
    local, at, domain = address.rpartition("@")
    return f"{local}{at}{ascii_domain(domain)}" if at else address


def _to_header(name: str, address: str) -> str:
    """The To header's value for one recipient.

    An ASCII address (an IDNA domain in A-labels) goes with the name RFC 2047-encoded, readable
    everywhere; a non-ASCII local part can only travel with SMTPUTF8, so the header is written
    as RFC 6532 allows it then, in UTF-8 as it is."""
    name = _one_line(name)[:MAX_NAME]
    addr = wire_address(address)
    if addr.isascii():
        return email.utils.formataddr((name, addr), charset="utf-8")
    if not name:
        return addr
    if _SPECIALS.search(name):
        name = '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"{name} <{address}>"


@functools.lru_cache(maxsize=2)
def _date(second: int) -> str:
    """The Date header of a second: formatted once a second, not once a message."""
    return email.utils.format_datetime(datetime.fromtimestamp(second, UTC))


def _qp(text: str) -> bytes:
    body = text.replace("\r\n", "\n").replace("\r", "\n")
    return quopri.encodestring(body.encode("utf-8")).replace(b"\n", b"\r\n")


@dataclass
class CompiledMessage:
    """One campaign's message, compiled once per broadcast, rendered once per recipient."""

    subject: Any
    text: Any
    html: Any | None
    from_header: str
    from_domain: str
    reply_to_header: str | None = None
    links: Links | None = None
    # Opens and clicks (messages/tracking.py): the signed URLs of a rewritten message.
    tracker: Tracker | None = None

    def __post_init__(self) -> None:
        # The preference link is signed per message only if a part shows it (an HMAC saved).
        self.shows_preferences = any(
            "preferences_url" in getattr(t, "senddock_names", ("preferences_url",))
            for t in (self.subject, self.text, self.html)
            if t is not None
        )

    def unsubscribe(self, rcpt: Recipient) -> Unsubscribe | None:
        """The recipient's unsubscribe link, if this campaign's links are signed."""
        if self.links is None or rcpt.subscriber_id is None:
            return None
        return self.links.unsubscribe(rcpt.subscriber_id)

    def preferences(self, rcpt: Recipient) -> str:
        """The recipient's preference page, or '' (a test send, unsigned links, or no part
        that shows it)."""
        if self.links is None or rcpt.subscriber_id is None or not self.shows_preferences:
            return ""
        return self.links.preferences(rcpt.subscriber_id)

    def context(self, rcpt: Recipient, url: str, preferences: str = "") -> dict[str, Any]:
        sub = {
            "id": rcpt.subscriber_id,
            "email": rcpt.email,
            "name": rcpt.name,
            "attributes": rcpt.attributes,
        }
        return {
            "subscriber": sub,
            "email": rcpt.email,
            "name": rcpt.name,
            "attributes": rcpt.attributes,
            "unsubscribe_url": url,
            "preferences_url": preferences,
        }

    def parts(self, rcpt: Recipient) -> tuple[str, str, str | None]:
        """Subject, text and HTML for one recipient; TemplateProblem names part and line."""
        return self._parts(rcpt, self.unsubscribe(rcpt))

    def _parts(
        self, rcpt: Recipient, unsubscribe: Unsubscribe | None
    ) -> tuple[str, str, str | None]:
        ctx = self.context(rcpt, unsubscribe.url if unsubscribe else "", self.preferences(rcpt))
        if self.tracker is not None:
            ctx.update(self.tracker.context(rcpt.subscriber_id or 0))
        try:
            with limits():  # the parts of one message share one clock and one work count
                subject = _one_line(_render(self.subject, ctx))[:MAX_SUBJECT]
                text = _render(self.text, ctx)
                html = _render(self.html, ctx) if self.html is not None else None
        except RenderStopped as exc:  # the watchdog, just as the last part ended
            raise TemplateProblem(_STOPPED, field=PART_FIELDS["text"]) from exc
        return subject, text, html

    def render(self, rcpt: Recipient, message_id: str) -> bytes:
        """The whole RFC 5322 message for one recipient, CRLF line endings."""
        unsubscribe = self.unsubscribe(rcpt)
        try:
            subject, text, html = self._parts(rcpt, unsubscribe)
        except TemplateProblem as exc:
            raise TemplateProblem(f"rendering for {rcpt.email}: {exc}", field=exc.field) from exc
        to = _to_header(rcpt.name, rcpt.email)
        head = [f"From: {self.from_header}"]
        if self.reply_to_header:
            head.append(f"Reply-To: {self.reply_to_header}")
        head += [
            f"To: {to}",
            f"Subject: {_encode_header(subject)}",
            f"Date: {_date(int(time.time()))}",
            f"Message-ID: {message_id}",
        ]
        if unsubscribe is not None:
            # RFC 2369 and RFC 8058: receivers (Gmail, Yahoo) POST to the https URL at once.
            head.append(f"List-Unsubscribe: {unsubscribe.header}")
            head.append("List-Unsubscribe-Post: List-Unsubscribe=One-Click")
        head.append("MIME-Version: 1.0")
        if html is None:
            head += [
                "Content-Type: text/plain; charset=utf-8",
                "Content-Transfer-Encoding: quoted-printable",
            ]
            return ("\r\n".join(head) + "\r\n\r\n").encode() + _qp(text)
        boundary = "=_sd_" + secrets.token_hex(12)
        head.append(f'Content-Type: multipart/alternative; boundary="{boundary}"')
        parts = [("\r\n".join(head) + "\r\n\r\n").encode()]
        for ctype, body in (("text/plain", text), ("text/html", html)):
            parts.append(
                f"--{boundary}\r\nContent-Type: {ctype}; charset=utf-8\r\n"
                "Content-Transfer-Encoding: quoted-printable\r\n\r\n".encode()
            )
            parts.append(_qp(body) + b"\r\n")
        parts.append(f"--{boundary}--\r\n".encode())
        return b"".join(parts)


def compile_message(
    subject: str,
    from_addr: str,
    text_body: str | None,
    html_body: str | None = None,
    *,
    reply_to: str | None = None,
    links: Links | None = None,
    tracker: Tracker | None = None,
) -> CompiledMessage:
    """Compile and try-render every part, so a template error surfaces now, not mid-broadcast.

    Without a text body the text part is derived from the HTML template (once, here).
    """
    check_header("subject", subject, "subject")
    from_header, addr = _address_header("from", from_addr, "from_addr")
    reply_header = _address_header("reply-to", reply_to, "reply_to")[0] if reply_to else None
    if not text_body and not html_body:
        raise TemplateProblem(
            "a campaign needs a text body, an HTML body, or both", field="text_body"
        )
    for part, body in (("text", text_body), ("html", html_body)):
        if body and len(body.encode()) > MAX_BODY:
            size = len(body.encode()) / 1024 / 1024
            raise TemplateProblem(
                f"the {part} body is {size:.1f} MB; the limit is 2 MB", field=PART_FIELDS[part]
            )
    html = _compile(_HTML_ENV, "html", html_body) if html_body else None
    if not text_body:
        assert html_body is not None
        text_body = html_to_text(html_body)
    compiled = CompiledMessage(
        subject=_compile(_TEXT_ENV, "subject", subject),
        text=_compile(_TEXT_ENV, "text", text_body),
        html=html,
        from_header=from_header,
        from_domain=addr.rsplit("@", 1)[1],
        reply_to_header=reply_header,
        links=links,
        tracker=tracker,
    )
    sample = Recipient("sample@example.com", "Sample", SampleAttributes(), subscriber_id=0)
    try:
        compiled.render(sample, "<check@senddock>")
    except TemplateProblem as exc:
        if not _from_missing_data(exc):
            raise
        # An attribute the sample lacks (`attributes.n + 1`): real subscribers may have it;
        # one who does not fails alone at send. Misspelt names: campaigns/template_check.py.
    return compiled


class MissingAttribute(UndefinedError):
    """What a template did with an attribute the (sample) subscriber lacks could not be done."""


class Absent(ChainableUndefined):
    """An attribute a subscriber lacks: empty, whatever is done with it (`.upper()`); what
    cannot be done with nothing (`+ 1`) raises MissingAttribute."""

    def __call__(self, *args: Any, **kwargs: Any) -> Absent:  # type: ignore[override]
        return self


class SampleAttributes(dict[str, Any]):
    """Attributes for a check render: a key a subscriber lacks is Absent, not an error."""

    def __missing__(self, key: str) -> Absent:
        return Absent(name=key, exc=MissingAttribute)


def _from_missing_data(exc: BaseException) -> bool:
    """Did this error come from a value the sample subscriber lacks?"""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, MissingAttribute):
            return True
        seen = seen.__cause__
    return False


def strict_sandbox(undefined: type[Undefined], autoescape: bool) -> ImmutableSandboxedEnvironment:
    """The message's sandbox, with its limits, and another kind of undefined (for checks)."""
    return Sandbox(undefined=undefined, autoescape=autoescape, keep_trailing_newline=True)


def render_checked(template: Any, ctx: dict[str, Any]) -> str:
    """Render a template of `strict_sandbox` within its limits (or its caller's)."""
    try:
        with limits():
            return render_limited(template, ctx)
    except RenderStopped as exc:  # the watchdog, just as the render ended
        raise SecurityError(_STOPPED) from exc
