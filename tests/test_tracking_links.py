"""Issue 37, the message side: which links a tracked message rewrites, and that each rendered
message signs its own (no database; messages/tracking.py). Each test says what it catches."""

from __future__ import annotations

import email
import email.policy
import re

import pytest

from senddock.errors import Invalid
from senddock.messages import (
    PREFERENCES,
    UNSUBSCRIBE,
    Recipient,
    compile_message,
    html_to_text,
    verify,
)
from senddock.messages.tracking import CLICK, OPEN, Track, Tracker, ascii_url, rewrite
from senddock.web.tracking import judge

BASE = "https://news.example.org"


def rewritten(html: str) -> tuple[str, str, tuple[str, ...]]:
    text = html_to_text(html)
    done = rewrite(text, html, Track(opens=True, clicks=True), BASE)
    assert done.html is not None
    return done.text, done.html, done.urls


# (href as written, tracked as this URL or None: left as written)
HREFS = [
    ("https://example.org/a", "https://example.org/a"),
    ("HTTP://Example.org/b?x=1&amp;y=2", "http://Example.org/b?x=1&y=2"),
    ("https://bücher.example/straße?q=ü", "https://xn--bcher-kva.example/stra%C3%9Fe?q=%C3%BC"),
    ("mailto:news@example.org", None),
    ("tel:+4712345678", None),
    ("#top", None),
    ("/relative/path", None),
    ("{{ unsubscribe_url }}", None),
    ("{{ preferences_url }}", None),
    ("https://example.org/u/{{ subscriber.id }}", None),
    (f"{BASE}/unsubscribe/1.2.abc", None),
    (f"{BASE}/preferences/1.2.abc", None),
    (f"{BASE}/view/1.2.abc", None),
    ("https://☃.example/no-idna-form", None),
    ("https://example.org/" + "a" * 3000, None),
]


@pytest.mark.parametrize(("href", "tracked"), HREFS)
def test_each_kind_of_link_is_rewritten_or_left_as_written(href: str, tracked: str | None) -> None:
    # Catches: an unsubscribe, preference or mailto link sent through the redirect (the
    # unsubscribe would then be counted as a click and could break one-click), a per-recipient
    # URL frozen to one recipient's value, a non-ASCII URL stored in a form no Location takes.
    _, html, urls = rewritten(f'<p><a href="{href}">link</a></p>')
    if tracked is None:
        assert urls == ()
        assert f'href="{href}"' in html
    else:
        assert urls == (tracked,)
        assert 'href="{{ senddock_click[0] }}"' in html


def test_a_link_in_both_parts_is_one_link_and_notrack_holds_in_both() -> None:
    # Catches: the text part's copy of a link counted as another link (two rows, halved
    # figures), and a link marked not to be tracked rewritten in the derived text part.
    html = (
        "<a href=\"https://example.org/a\">A</a> <a href='https://example.org/b'>B</a>"
        ' <a data-senddock-notrack href="https://example.org/private">P</a>'
        ' {% raw %}<a href="https://example.org/raw">R</a>{% endraw %}</body>'
    )
    text, out, urls = rewritten(html)
    assert urls == ("https://example.org/a", "https://example.org/b")
    assert "senddock_click[0]" in text and "senddock_click[1]" in text
    assert "https://example.org/private" in text and "https://example.org/private" in out
    assert '<a href="https://example.org/raw">' in out
    assert out.index("senddock_open") < out.index("</body>")


def test_text_urls_keep_their_punctuation_outside() -> None:
    # Catches: a sentence's full stop or a closing parenthesis taken into the stored URL (the
    # redirect would then go to a page that does not exist).
    text = "See https://example.org/a. And (https://example.org/b) or https://example.org/c?x=1!\n"
    done = rewrite(text, None, Track(clicks=True), BASE)
    assert done.urls == (
        "https://example.org/a",
        "https://example.org/b",
        "https://example.org/c?x=1",
    )
    assert done.text == (
        "See {{ senddock_click[0] }}. And ({{ senddock_click[1] }}) or {{ senddock_click[2] }}!\n"
    )


def test_each_recipient_gets_links_signed_for_them_alone() -> None:
    # Catches: a token that does not name the recipient or the link (one person's click
    # counted for another), a token signed under the unsubscribe purpose (a click link that
    # would unsubscribe), and odd data (non-ASCII name, IDNA domain) breaking the render.
    key = b"k" * 32
    html = '<p>Hi {{ name }}</p><a href="https://example.org/a">A</a></body>'
    done = rewrite(html_to_text(html), html, Track(True, True), BASE)
    tracker = Tracker(BASE, key, 7, (41,), opens=True)
    message = compile_message("Hi", "News <n@example.org>", done.text, done.html, tracker=tracker)
    for sub, addr in ((5, "zoë@bücher.example"), (6, "ada@example.com")):
        raw = message.render(Recipient(addr, "Zoë Bücher", {}, sub), "<m@x>")
        msg = email.message_from_bytes(raw, policy=email.policy.default)
        html_part = msg.get_body(("html",))
        assert html_part is not None
        body = html_part.get_content()
        assert "Zoë Bücher" in body
        click = re.search(r'href="https://news\.example\.org/r/([^"]+)"', body)
        pixel = re.search(r'src="https://news\.example\.org/o/([^"]+)"', body)
        assert click and pixel
        assert verify(key, CLICK, click.group(1)) == (sub, 7, 41)
        assert verify(key, OPEN, pixel.group(1)) == (sub, 7)
        for purpose in (UNSUBSCRIBE, PREFERENCES):
            assert verify(key, purpose, click.group(1)) is None


def test_track_is_parsed_strictly() -> None:
    # Catches: a typo (`--track opnes`) silently tracking nothing, or `none` tracking.
    assert Track.parse("opens,clicks") == Track(True, True) == Track.parse("both")
    assert Track.parse("clicks").stored == "clicks"
    assert not Track.parse("none") and not Track.parse("")
    assert Track.parse("both, anonymous").stored == "opens,clicks,anonymous"
    assert Track.parse("anonymous").stored == ""  # anonymous alone tracks nothing
    with pytest.raises(Invalid):
        Track.parse("none,opens")
    with pytest.raises(Invalid) as refused:
        Track.parse("opnes")
    assert refused.value.field == "track"


def test_ascii_url_refuses_what_a_location_header_cannot_carry() -> None:
    # Catches: header injection through a stored URL (CR/LF), or a javascript: target.
    assert ascii_url("https://example.org/a\r\nSet-Cookie: x=1") is None
    assert ascii_url("javascript:alert(1)") is None
    assert ascii_url("https://example.org/a b") == "https://example.org/a%20b"


def test_a_head_request_is_judged_a_machine() -> None:
    # Catches: link scanners' HEAD requests counted as people.
    assert judge("HEAD", 1) == (True, "HEAD request")
    assert judge("GET", 1) == (False, None)
    assert judge("GET", 10_000)[0] is True
