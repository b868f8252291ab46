"""The words a person agreed to are part of their consent record (issue 35, item 5).

A list words its sign-up consent (`lists set --consent-text`, or the default wording); its
form shows the words, and each sign-up through a real `senddock serve` keeps the words of its
moment, readable with `subscribers consent` (text, JSON, CSV). Before migration 0032 no
sign-up kept any wording: every assertion on `consent_text` fails there.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator

import pytest

from senddock.audience import signup
from support import Conn, senddock, wait_until, worker_env
from test_signup import AGENT, cli_public_list, post
from web_support import Server, start_server

FIRST = "Yes: send me the Weekly News <b>every Friday</b>; I may leave whenever I like."
SECOND = "Send me the Weekly News."


@pytest.fixture
def env(db_url: str) -> dict[str, str]:
    return worker_env(db_url, "smtp://127.0.0.1:1")


@pytest.fixture
def server(db_url: str) -> Iterator[Server]:
    with start_server(db_url, "smtp://127.0.0.1:1", workers=False) as srv:
        yield srv


def kept(conn: Conn, address: str) -> list[str]:
    return [
        str(r["consent_text"])
        for r in conn.execute(
            "SELECT c.consent_text FROM signup_consents c JOIN subscribers s"
            " ON s.id = c.subscriber_id WHERE s.email = %s ORDER BY c.id",
            (address,),
        )
    ]


def test_each_sign_up_keeps_the_words_its_form_showed(
    env: dict[str, str], conn: Conn, server: Server
) -> None:
    token = cli_public_list(env, "news", "--consent-text", FIRST)
    form = senddock(env, "lists", "form", "news").stdout
    assert "Yes: send me the Weekly News &lt;b&gt;every Friday&lt;/b&gt;" in form  # escaped

    assert post(server.url, {"list": token, "email": "ada@example.org"}).status_code == 200
    assert wait_until(lambda: kept(conn, "ada@example.org") == [FIRST], timeout=15)

    # New words: the next sign-up keeps them, the earlier one keeps its own.
    changed = senddock(env, "lists", "set", "news", "--consent-text", SECOND)
    assert changed.returncode == 0, changed.stderr
    assert post(server.url, {"list": token, "email": "bob@example.org"}).status_code == 200
    assert wait_until(lambda: kept(conn, "bob@example.org") == [SECOND], timeout=15)
    assert kept(conn, "ada@example.org") == [FIRST]

    # Readable and exportable per subscriber.
    text = senddock(env, "subscribers", "consent", "ada@example.org")
    assert text.returncode == 0, text.stderr
    assert f"agreed to: {FIRST}" in text.stdout
    record = json.loads(
        senddock(env, "subscribers", "consent", "ada@example.org", "--format", "json").stdout
    )
    [one] = record["signups"]
    assert (one["consent_text"], one["user_agent"], one["list"]) == (FIRST, AGENT, "news")
    table = senddock(env, "subscribers", "consent", "bob@example.org", "--format", "csv").stdout
    [row] = list(csv.DictReader(io.StringIO(table)))
    assert (row["kind"], row["consent_text"]) == ("signup", SECOND)

    # '' restores the default wording, shown on the form and kept with the next sign-up.
    assert senddock(env, "lists", "set", "news", "--consent-text", "").returncode == 0
    default = signup.DEFAULT_CONSENT.format(list="news")
    assert default in senddock(env, "lists", "form", "news").stdout
    assert post(server.url, {"list": token, "email": "cy@example.org"}).status_code == 200
    assert wait_until(lambda: kept(conn, "cy@example.org") == [default], timeout=15)


def test_consent_text_that_cannot_be_shown_is_refused_in_one_line(env: dict[str, str]) -> None:
    for bad, why in (("x" * 2001, "longer than 2000"), ("a\x07b", "control character")):
        done = senddock(env, "lists", "set", "news", "--consent-text", bad)
        assert done.returncode != 0
        [line] = done.stderr.strip().splitlines()
        assert re.search(why, line), line
