"""What a receiving mailbox sees: headers Gmail's and Yahoo's bulk-sender rules require, and
both bodies, parsed from what a real SMTP server received from a real worker."""

from __future__ import annotations

import email
import email.policy
import email.utils
import time
from email.message import EmailMessage
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from senddock.audience.lists import ensure_list
from senddock.campaigns import broadcast, create_campaign
from senddock.campaigns.compose import link_key
from senddock.config import Settings
from senddock.messages import (
    UNSUBSCRIBE,
    HeaderError,
    Links,
    Recipient,
    compile_message,
    sign,
    verify,
)
from senddock.testing import Catcher
from support import Conn, ThreadWorker, jobs, seed_list, unfinished, wait_until

PUBLIC = "https://news.example.org"


def parse(data: bytes) -> EmailMessage:
    msg = email.message_from_bytes(data, policy=email.policy.default)
    assert isinstance(msg, EmailMessage)
    return msg


def bodies(msg: EmailMessage) -> dict[str, str]:
    """{content type: decoded text} of every text part."""
    found: dict[str, str] = {}
    for part in msg.walk():
        if part.get_content_maintype() == "text":
            assert isinstance(part, EmailMessage)
            found[part.get_content_type()] = str(part.get_content()).replace("\r\n", "\n")
    return found


def run_to_end(db_url: str, catcher: Catcher, conn: Conn, bid: int, n: int) -> None:
    with ThreadWorker(db_url, catcher.url):
        assert catcher.wait_for(n, timeout=60)
        assert wait_until(lambda: unfinished(conn, bid) == 0)


def deliver_to_ada(db_url: str, conn: Conn, catcher: Catcher, **campaign: Any) -> EmailMessage:
    """Send one campaign (defaults below, overridden by `campaign`) to ada@example.com through
    a real worker; the message the server received."""
    seed_list(conn, "news", ["ada@example.com"])
    fields: dict[str, Any] = {
        "name": "c",
        "list_name": "news",
        "subject": "s",
        "from_addr": "news@example.org",
        "text_body": "x\n",
    }
    bid, _, _ = broadcast(conn, create_campaign(conn, **(fields | campaign)))
    run_to_end(db_url, catcher, conn, bid, 1)
    return parse(catcher.received()[0].data)


def unsubscribe_links(msg: EmailMessage) -> tuple[str, str]:
    """(https URL, mailto URI) of the List-Unsubscribe header."""
    value = str(msg["List-Unsubscribe"])
    uris = [u.strip().strip("<>") for u in value.split(",")]
    assert len(uris) == 2, value
    https = next(u for u in uris if u.startswith("https://"))
    mailto = next(u for u in uris if u.startswith("mailto:"))
    return https, mailto


@pytest.fixture(autouse=True)
def public_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SENDDOCK_PUBLIC_URL", PUBLIC)
    monkeypatch.delenv("SENDDOCK_SECRET_KEY", raising=False)
    monkeypatch.delenv("SENDDOCK_UNSUBSCRIBE_MAILTO", raising=False)


def test_every_message_has_date_from_reply_to_and_one_click_unsubscribe_headers(
    db_url: str, conn: Conn, catcher: Catcher
) -> None:
    seed_list(conn, "news", ["ada@example.com", "grace@example.com"])
    conn.execute(
        "UPDATE subscribers SET name = 'Ada Lovelace', attributes = '{\"city\": \"London\"}'"
        " WHERE email = 'ada@example.com'"
    )
    cid = create_campaign(
        conn,
        name="June",
        list_name="news",
        subject="Hello {{ subscriber.name }}",
        from_addr="Zoë's News <news@example.org>",
        reply_to="Editor <editor@example.org>",
        text_body="Hi {{ subscriber.name }} from {{ subscriber.attributes.city }}.\n"
        "Leave: {{ unsubscribe_url }}\n",
        html_body="<p>Hi <b>{{ subscriber.name }}</b></p>"
        '<p><a href="{{ unsubscribe_url }}">Unsubscribe</a></p>',
    )
    bid, _, _ = broadcast(conn, cid)
    run_to_end(db_url, catcher, conn, bid, 2)

    rows = jobs(conn, bid)
    got = {r.rcpt: parse(r.data) for r in catcher.received()}
    assert set(got) == {"ada@example.com", "grace@example.com"}
    urls = set()
    for rcpt, msg in got.items():
        assert msg["Message-ID"] == rows[rcpt]["message_id"]
        assert email.utils.parsedate_to_datetime(str(msg["Date"])).tzinfo is not None
        assert msg["From"].addresses[0].display_name == "Zoë's News"
        assert msg["From"].addresses[0].addr_spec == "news@example.org"
        assert msg["Reply-To"].addresses[0].addr_spec == "editor@example.org"
        assert msg["To"].addresses[0].addr_spec == rcpt
        assert msg["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
        https, mailto = unsubscribe_links(msg)
        assert https.startswith(PUBLIC + "/unsubscribe/")
        assert mailto.startswith("mailto:news@example.org?subject=")
        token = https.rsplit("/", 1)[1]
        assert token in unquote(urlsplit(mailto).query)
        assert msg.get_content_type() == "multipart/alternative"
        parts = bodies(msg)
        assert set(parts) == {"text/plain", "text/html"}
        # The same per-recipient URL in the header and in both bodies.
        assert f"Leave: {https}" in parts["text/plain"]
        assert f'href="{https}"' in parts["text/html"]
        urls.add(https)
    assert len(urls) == 2, "each recipient has a link of their own"

    ada = got["ada@example.com"]
    assert ada["Subject"] == "Hello Ada Lovelace"
    assert "Hi Ada Lovelace from London." in bodies(ada)["text/plain"]
    assert "<b>Ada Lovelace</b>" in bodies(ada)["text/html"]


def test_the_unsubscribe_link_names_its_subscriber_and_campaign_under_the_stored_key(
    db_url: str, conn: Conn, catcher: Catcher
) -> None:
    https, _ = unsubscribe_links(
        deliver_to_ada(
            db_url,
            conn,
            catcher,
            text_body="{{ unsubscribe_url }}\n",
        )
    )
    token = https.rsplit("/", 1)[1]
    job = conn.execute(
        "SELECT j.subscriber_id AS sid, c.id AS cid FROM broadcast_jobs j"
        " JOIN campaigns c ON c.broadcast_id = j.broadcast_id"
    ).fetchone()
    assert job is not None
    key = link_key(conn, Settings())
    assert verify(key, UNSUBSCRIBE, token) == (job["sid"], job["cid"])


def test_secret_key_from_the_environment_overrides_the_stored_one(
    db_url: str, conn: Conn, catcher: Catcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SENDDOCK_SECRET_KEY", "a key the self-hoster chose")
    monkeypatch.setenv("SENDDOCK_UNSUBSCRIBE_MAILTO", "leave@example.org")
    https, mailto = unsubscribe_links(
        deliver_to_ada(
            db_url,
            conn,
            catcher,
        )
    )
    token = https.rsplit("/", 1)[1]
    assert verify(b"a key the self-hoster chose", UNSUBSCRIBE, token) is not None
    stored = link_key(conn, Settings(secret_key=None))
    assert verify(stored, UNSUBSCRIBE, token) is None
    assert mailto.startswith("mailto:leave@example.org?")


def test_without_a_text_body_the_text_part_is_derived_from_the_html(
    db_url: str, conn: Conn, catcher: Catcher
) -> None:
    msg = deliver_to_ada(
        db_url,
        conn,
        catcher,
        text_body=None,
        html_body="<html><head><style>p { color: red }</style></head><body>"
        "<h1>June &amp; July</h1><p>Hi {{ subscriber.name }},<br>see "
        '<a href="https://example.org/x?a=1&amp;b=2">the notes</a>.</p>'
        "<ul><li>one</li><li>two &lt;3</li></ul></body></html>",
    )
    assert msg.get_content_type() == "multipart/alternative"
    text = bodies(msg)["text/plain"]
    assert text.splitlines() == [
        "June & July",
        "",
        "Hi Name 1,",
        "see the notes (https://example.org/x?a=1&b=2).",
        "",
        "- one",
        "- two <3",
    ]
    assert "color" not in text


def test_a_text_only_campaign_is_one_text_plain_part(
    db_url: str, conn: Conn, catcher: Catcher
) -> None:
    msg = deliver_to_ada(
        db_url,
        conn,
        catcher,
        subject="Ünïcode subject for {{ subscriber.name }}",
        from_addr="news@example.org",
        text_body="Grüße, {{ subscriber.name }}!\n",
    )
    assert msg.get_content_type() == "text/plain"
    assert msg["Subject"] == "Ünïcode subject for Name 1"
    assert bodies(msg) == {"text/plain": "Grüße, Name 1!\n"}
    assert msg["Reply-To"] is None


@pytest.mark.parametrize(
    "field, value",
    [
        ("reply_to", "Editor <editor@example.org>\r\nBcc: victim@example.com"),
        ("reply_to", "Editor\n <editor@example.org>"),
        ("from_addr", "News\r\nBcc: x@example.com <news@example.org>"),
        ("subject", "Hi\nBcc: x@example.com"),
        ("name", "June\r\nX-Evil: 1"),
    ],
)
def test_cr_or_lf_in_any_header_value_is_refused_at_create(
    conn: Conn, field: str, value: str
) -> None:
    ensure_list(conn, "news")
    args: dict[str, Any] = {
        "name": "c",
        "list_name": "news",
        "subject": "s",
        "from_addr": "news@example.org",
        "text_body": "x",
        field: value,
    }
    with pytest.raises(HeaderError, match="CR or LF"):
        create_campaign(conn, **args)
    assert conn.execute("SELECT count(*) AS n FROM campaigns").fetchone() == {"n": 0}


def test_a_reply_to_that_is_not_an_address_is_refused_at_create(conn: Conn) -> None:
    ensure_list(conn, "news")
    with pytest.raises(HeaderError, match="reply-to"):
        create_campaign(
            conn,
            name="c",
            list_name="news",
            subject="s",
            from_addr="news@example.org",
            text_body="x",
            reply_to="not an address",
        )


def test_a_line_break_in_a_subscriber_name_never_reaches_a_header() -> None:
    links = Links(PUBLIC, b"k" * 32, 1, "news@example.org")
    msg = compile_message("Hi {{ name }}", "news@example.org", "x", links=links)
    data = msg.render(Recipient("a@example.com", "Eve\r\nBcc: x@example.com", {}, 5), "<m@x>")
    parsed = parse(data)
    assert parsed["Bcc"] is None
    assert parsed["Subject"] == "Hi Eve Bcc: x@example.com"


def test_the_date_header_is_the_second_the_message_was_rendered() -> None:
    # The Date is formatted once a second, not once a message: it must still move on.
    msg = compile_message("Hi", "news@example.org", "x")
    rcpt = Recipient("a@example.com")
    dates = []
    for _ in range(2):
        before = int(time.time())
        date = email.utils.parsedate_to_datetime(str(parse(msg.render(rcpt, "<m@x>"))["Date"]))
        assert before <= date.timestamp() <= time.time()
        dates.append(date)
        time.sleep(1.05)
    assert dates[1] > dates[0]


def test_one_signature_makes_the_link_in_the_body_and_in_list_unsubscribe() -> None:
    links = Links(PUBLIC, b"k" * 32, 3, "news@example.org")
    msg = compile_message("Hi", "news@example.org", "Leave: {{ unsubscribe_url }}", links=links)
    parsed = parse(msg.render(Recipient("a@example.com", "", {}, 9), "<m@x>"))
    https, mailto = unsubscribe_links(parsed)
    assert https == links.unsubscribe(9).url == f"{PUBLIC}/unsubscribe/{links.token(9)}"
    assert f"Leave: {https}" in bodies(parsed)["text/plain"]
    assert unquote(mailto) == f"mailto:news@example.org?subject=unsubscribe {links.token(9)}"
    assert verify(b"k" * 32, UNSUBSCRIBE, links.token(9)) == (9, 3)


def test_a_signed_link_is_unguessable_and_a_tampered_one_is_refused() -> None:
    key = b"0123456789abcdef0123456789abcdef"
    token = sign(key, UNSUBSCRIBE, 42, 7)
    assert verify(key, UNSUBSCRIBE, token) == (42, 7)
    ids, mac = token.rsplit(".", 1)
    assert len(mac) == 22  # 128 bits
    # Another subscriber's id with the same signature; any changed character; another key;
    # another purpose; junk.
    assert verify(key, UNSUBSCRIBE, "43.7." + mac) is None
    for i in range(len(token)):
        c = token[i]
        swapped = token[:i] + ("A" if c != "A" else "B") + token[i + 1 :]
        assert verify(key, UNSUBSCRIBE, swapped) is None, swapped
    assert verify(b"another key", UNSUBSCRIBE, token) is None
    assert verify(key, "confirm", token) is None
    for junk in ("", ".", "42.7", "42.7.", f"{ids}.{mac}=", f"{ids}.{mac}x", "a.b.c"):
        assert verify(key, UNSUBSCRIBE, junk) is None


def test_the_preference_link_is_signed_only_for_a_message_that_shows_it() -> None:
    """One HMAC a message saved where no part names `preferences_url`; where one does (the
    HTML part only, here), every recipient's link is there and signed for that purpose.
    Fails without CompiledMessage.shows_preferences (the link was made for every message)."""
    links = Links(PUBLIC, b"k" * 32, 3, "news@example.org")
    plain = compile_message("Hi", "news@example.org", "Hello {{ name }}", links=links)
    assert plain.shows_preferences is False
    assert plain.preferences(Recipient("a@example.com", "", {}, 9)) == ""
    html = "<p>Hi</p><a href='{{ preferences_url }}'>Your lists</a>"
    shown = compile_message("Hi", "news@example.org", "Hi", html, links=links)
    assert shown.shows_preferences is True
    page = bodies(parse(shown.render(Recipient("a@example.com", "", {}, 9), "<m@x>")))
    assert links.preferences(9) in page["text/html"]
    assert links.preferences(9) != f"{PUBLIC}/preferences/{links.token(9)}"  # its own purpose
