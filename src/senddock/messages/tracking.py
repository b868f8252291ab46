"""Opens and clicks (issue 37), in the message: what is tracked, links rewritten, the pixel.

Works on the *templates*, once per broadcast, like the layout (messages/layout.py): each
http(s) link of the HTML part (`<a href>`) and of the text part becomes
`{{ senddock_click[N] }}`, and with opens an image `{{ senddock_open }}` ends the HTML body.
Each message then renders its own signed URLs (`Tracker`): `{public_url}/r/{token}` and
`{public_url}/o/{token}`, the token `<subscriber>.<broadcast>[.<link>].<mac>` signed like the
unsubscribe link (messages/links.py) under purposes of their own (an anonymous campaign's
tokens leave the subscriber out). The token names the
recipient as the unsubscribe link does (subscriber and broadcast, which name exactly one job),
and a link by the id its URL was stored under (tracking/links.py): the redirect reads the URL
from the database, never from the request.

Never rewritten: a link whose href holds a template tag (`{{ unsubscribe_url }}`,
`{{ preferences_url }}`, any per-recipient URL: it is not known until each message is
rendered), one to our own public pages (unsubscribe, preferences, confirm, view), mailto: and
anything not http(s), an `<a>` marked `data-senddock-notrack`, and a URL that has no ASCII form
(an IDNA host that does not encode). A URL is stored in its ASCII form (IDNA host, percent-encoded
path), which is what the redirect's Location carries. No database here.

The trap link (item 3d): with clicks tracked, the HTML part (never the text part) ends with
one link no person meets, `{public_url}/t/{token}` (purpose `trap`, the same ids as the
pixel): an `<a>` with no text and no image inside, `display:none` (and `mso-hide:all` for
Outlook's Word engine), `aria-hidden="true"` and `tabindex="-1"`. A client that strips styles
still shows nothing (an empty anchor has no box to see or click), screen readers and the Tab
key skip it. Machines that follow every href follow it: tracking/events.py marks that job's
clicks near it as a machine's.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import quote, urlsplit, urlunsplit

import idna

from senddock.errors import Invalid
from senddock.messages.links import Signer

CLICK = "click"
OPEN = "open"
TRAP = "trap"
# The template names a rewritten message reads (set per recipient by CompiledMessage).
CLICK_NAME = "senddock_click"
OPEN_NAME = "senddock_open"
TRAP_NAME = "senddock_trap"
# Our own pages: never counted as clicks (a click on them is the page's own business).
OWN_PAGES = ("/unsubscribe/", "/preferences/", "/confirm/", "/view/", "/r/", "/o/", "/t/")
MAX_URL = 2048  # a longer link is left as written (browsers and relays cut such URLs)

Kind = Literal["opens", "clicks"]
KINDS: tuple[Kind, ...] = ("opens", "clicks")


@dataclass(frozen=True)
class Track:
    """What a campaign tracks: opens, clicks or both; `anonymous`, counts per campaign only
    (no tracking URL names its recipient, so no event names a person, and nobody is counted
    once: people are not known). Stored as its words, e.g. 'opens,clicks,anonymous'; ''
    for nothing (campaigns.track, 0034)."""

    opens: bool = False
    clicks: bool = False
    anonymous: bool = False

    @classmethod
    def parse(cls, value: str | None, field: str = "track") -> Track:
        """From what a person writes: opens, clicks, both or none, and perhaps anonymous
        ('opens,clicks', 'both,anonymous', ''); Invalid, naming `field`, for anything else."""
        words = {w.strip().lower() for w in (value or "").replace(" ", ",").split(",")}
        words.discard("")
        if "both" in words:
            words = (words - {"both"}) | {"opens", "clicks"}
        if "none" in words:
            if words - {"none", "anonymous"}:
                raise Invalid("track: none goes alone", field=field)
            words = set()
        unknown = words - {"opens", "clicks", "anonymous"}
        if unknown:
            raise Invalid(
                f"track: {', '.join(sorted(unknown))!s} is not opens, clicks, both, none"
                " or anonymous",
                field=field,
            )
        tracked = bool(words & {"opens", "clicks"})
        return cls("opens" in words, "clicks" in words, tracked and "anonymous" in words)

    @property
    def stored(self) -> str:
        """The column's value (campaigns.track)."""
        words: list[str] = [k for k in KINDS if getattr(self, k)]
        if words and self.anonymous:
            words.append("anonymous")
        return ",".join(words)

    def __bool__(self) -> bool:
        return self.opens or self.clicks


# Jinja tags, a raw block first (its content is template text, not HTML to rewrite).
_JINJA = re.compile(
    r"\{%-?\s*raw\s*-?%\}.*?\{%-?\s*endraw\s*-?%\}|\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.S
)
_MARKED = re.compile("\x00(\\d+)\x00")
_A_TAG = re.compile(r"<a\b[^>]*>", re.I)
_HREF = re.compile(r"""(\shref\s*=\s*)("[^"]*"|'[^']*'|[^\s"'>]+)""", re.I)
_NOTRACK = re.compile(r"\sdata-senddock-notrack\b", re.I)
_TEXT_URL = re.compile(r"(?<![\w@/])https?://[^\s<>\"'\x00]+", re.I)
_BODY_END = re.compile(r"</body\s*>", re.I)
_TRAILING = ".,;:!?"


def ascii_url(url: str) -> str | None:
    """The URL as a Location header carries it (IDNA host, non-ASCII and spaces
    percent-encoded); None if it has no such form or is not an http(s) URL with a host."""
    if any(ord(c) < 32 or ord(c) == 127 for c in url):
        return None
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not host:
        return None
    if not host.isascii():
        try:
            ascii_host = idna.encode(host, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError):
            return None
        userinfo, at, _ = parts.netloc.rpartition("@")
        try:
            port = f":{parts.port}" if parts.port is not None else ""
        except ValueError:
            return None
        netloc = f"{userinfo}{at}{ascii_host}{port}"
        if not netloc.isascii():
            return None
        parts = parts._replace(netloc=netloc)
    safe = "/%:@!$&'()*+,;=-._~"
    return urlunsplit(
        (
            parts.scheme.lower(),
            parts.netloc,
            quote(parts.path, safe=safe),
            quote(parts.query, safe=safe + "?"),
            quote(parts.fragment, safe=safe + "?#"),
        )
    )


@dataclass(frozen=True)
class Rewritten:
    """The templates with their tracked links replaced, and those links' URLs in order of
    first appearance (a URL in both parts is one link)."""

    text: str
    html: str | None
    urls: tuple[str, ...]


class _Urls:
    """The URLs met so far, each with its index."""

    def __init__(self, public_url: str) -> None:
        base = public_url.rstrip("/").lower()
        self.own = tuple(base + page for page in OWN_PAGES)
        self.index: dict[str, int] = {}
        self.never: set[str] = set()  # marked data-senddock-notrack: in the text part too

    def exclude(self, written: str) -> None:
        url = ascii_url(written)
        if url is not None:
            self.never.add(url)

    def slot(self, written: str) -> int | None:
        """The index of a URL as written in a template (entities decoded by the caller);
        None when it is not to be tracked."""
        if "\x00" in written or len(written) > MAX_URL:
            return None  # a template tag in it: a per-recipient URL
        url = ascii_url(written)
        if url is None or url.lower().startswith(self.own) or url in self.never:
            return None
        return self.index.setdefault(url, len(self.index))


def _set_aside(source: str) -> tuple[str, list[str]]:
    kept: list[str] = []

    def mark(m: re.Match[str]) -> str:
        kept.append(m.group(0))
        return f"\x00{len(kept) - 1}\x00"

    return _JINJA.sub(mark, source), kept


def _put_back(marked: str, kept: list[str]) -> str:
    return _MARKED.sub(lambda m: kept[int(m.group(1))], marked)


def _click(i: int) -> str:
    return "{{ " + f"{CLICK_NAME}[{i}]" + " }}"


def _href(found: re.Match[str]) -> str:
    """The URL an href attribute holds: unquoted, its character references decoded."""
    value = found.group(2)
    if value[:1] in ("'", '"'):
        value = value[1:-1]
    return html.unescape(value)


def _rewrite_html(source: str, urls: _Urls, clicks: bool, opens: bool) -> str:
    marked, kept = _set_aside(source)

    def tag(m: re.Match[str]) -> str:
        whole = m.group(0)
        if _NOTRACK.search(whole):
            found = _HREF.search(whole)
            if found:
                urls.exclude(_href(found))
            return whole

        def href(h: re.Match[str]) -> str:
            i = urls.slot(_href(h))
            return h.group(0) if i is None else f'{h.group(1)}"{_click(i)}"'

        return _HREF.sub(href, whole, count=1)

    tail = ""
    if clicks:
        marked = _A_TAG.sub(tag, marked)
        tail += (
            "{% if " + TRAP_NAME + " %}"
            '<a href="{{ ' + TRAP_NAME + ' }}" aria-hidden="true" tabindex="-1"'
            ' style="display:none;mso-hide:all"></a>'
            "{% endif %}"
        )
    if opens:
        tail += (
            "{% if " + OPEN_NAME + " %}"
            '<img src="{{ ' + OPEN_NAME + ' }}" width="1" height="1" alt=""'
            ' style="display:block;border:0;width:1px;height:1px">'
            "{% endif %}"
        )
    if tail:
        ends = list(_BODY_END.finditer(marked))
        if ends:
            at = ends[-1].start()
            marked = marked[:at] + tail + marked[at:]
        else:
            marked = marked + tail
    return _put_back(marked, kept)


def _rewrite_text(source: str, urls: _Urls) -> str:
    marked, kept = _set_aside(source)

    def url(m: re.Match[str]) -> str:
        found = m.group(0)
        if m.end() < len(marked) and marked[m.end()] == "\x00":
            return found  # a template tag right after it: part of a per-recipient URL
        tail = ""
        while found and (
            found[-1] in _TRAILING
            or (found[-1] == ")" and found.count(")") > found.count("("))
            or (found[-1] == "]" and found.count("]") > found.count("["))
        ):
            tail = found[-1] + tail
            found = found[:-1]
        i = urls.slot(found)
        return m.group(0) if i is None else _click(i) + tail

    return _put_back(_TEXT_URL.sub(url, marked), kept)


def rewrite(text: str, html_source: str | None, track: Track, public_url: str) -> Rewritten:
    """The text and HTML templates of a tracked message (see the module). The text template
    must be given (derive it from the HTML first: its links are then the same links)."""
    urls = _Urls(public_url)
    new_html = None
    if html_source is not None:
        new_html = _rewrite_html(html_source, urls, track.clicks, track.opens)
    new_text = _rewrite_text(text, urls) if track.clicks else text
    return Rewritten(new_text, new_html, tuple(urls.index))


class _Clicks:
    """One recipient's click URLs, each signed when the template first prints it (a link is
    usually printed twice: in the text part and in the HTML)."""

    def __init__(self, tracker: Tracker, subscriber_id: int) -> None:
        self.tracker = tracker
        self.subscriber_id = subscriber_id
        self.made: dict[int, str] = {}

    def __getitem__(self, i: int) -> str:
        url = self.made.get(i)
        if url is None:
            link = self.tracker.link_ids[i]
            url = self.made[i] = self.tracker.click_url(self.subscriber_id, link)
        return url

    def __len__(self) -> int:
        return len(self.tracker.link_ids)


@dataclass(frozen=True)
class Tracker:
    """Signs one broadcast's tracking URLs: its links' stored ids, by their index in
    `Rewritten.urls`."""

    base_url: str
    key: bytes
    broadcast_id: int
    link_ids: tuple[int, ...]
    opens: bool
    # Tokens without the recipient: every message of the broadcast has the same URLs.
    anonymous: bool = False
    signer: Signer = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "signer", Signer(self.key))

    def _who(self, subscriber_id: int) -> tuple[int, ...]:
        return () if self.anonymous else (subscriber_id,)

    def click_url(self, subscriber_id: int, link_id: int) -> str:
        ids = (*self._who(subscriber_id), self.broadcast_id, link_id)
        return f"{self.base_url.rstrip('/')}/r/{self.signer.sign(CLICK, *ids)}"

    def open_url(self, subscriber_id: int) -> str:
        ids = (*self._who(subscriber_id), self.broadcast_id)
        return f"{self.base_url.rstrip('/')}/o/{self.signer.sign(OPEN, *ids)}"

    def trap_url(self, subscriber_id: int) -> str:
        ids = (*self._who(subscriber_id), self.broadcast_id)
        return f"{self.base_url.rstrip('/')}/t/{self.signer.sign(TRAP, *ids)}"

    def context(self, subscriber_id: int) -> dict[str, object]:
        """The template names a recipient's rewritten message reads (the trap's URL is only
        printed where clicks are tracked: the template holds it only then)."""
        return {
            CLICK_NAME: _Clicks(self, subscriber_id),
            OPEN_NAME: self.open_url(subscriber_id) if self.opens else "",
            TRAP_NAME: self.trap_url(subscriber_id) if self.link_ids else "",
        }
