"""Layouts and Markdown bodies (issue 22): through the real CLI and API, received by a real
SMTP server, with the sandbox's limits on hostile layouts and HTML in Markdown escaped."""

from __future__ import annotations

import email
import email.policy
import time
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path

import pytest

from senddock.campaigns import broadcast, create_campaign, layouts
from senddock.campaigns.broadcast import enqueue_all
from senddock.db import connect
from senddock.messages import TemplateProblem
from senddock.testing import Catcher
from support import (
    Conn,
    ThreadWorker,
    jobs,
    seed_list,
    senddock,
    unfinished,
    wait_until,
    worker_env,
)
from test_cli_first_day import one_line_error
from web_support import ServerFactory, make_token, servers

NO_SMTP = "smtp://127.0.0.1:9?tls=none"
HTML = (
    "<header>Bücherpost · {{ subscriber.name }}</header>\n{{ content }}\n"
    '<footer><a href="{{ unsubscribe_url }}">Abmelden</a></footer>\n'
)
TEXT = "BÜCHERPOST\n{{ content }}\n-- unsubscribe: {{ unsubscribe_url }}\n"


def empty_layouts(db_url: str) -> None:
    with connect(db_url) as c:
        c.execute("TRUNCATE layouts RESTART IDENTITY CASCADE")


@pytest.fixture(autouse=True)
def no_layouts(db_url: str) -> Iterator[None]:
    """No layout before or after each test (conftest's TRUNCATE list predates them): a default
    layout left behind would wrap every later test's campaigns."""
    empty_layouts(db_url)
    yield
    empty_layouts(db_url)


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    yield from servers(db_url)


def parts(data: bytes) -> tuple[str, str]:
    """(text, html) of a received message."""
    msg = email.message_from_bytes(data, policy=email.policy.default)
    assert isinstance(msg, EmailMessage)
    text = msg.get_body(("plain",))
    html = msg.get_body(("html",))
    assert text is not None and html is not None
    return str(text.get_content()), str(html.get_content())


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_layout_commands_add_list_show_edit_default_and_delete_refused_while_used(
    db_url: str, tmp_path: Path
) -> None:
    env = worker_env(db_url, NO_SMTP)
    html = write(tmp_path, "l.html", HTML)
    added = senddock(env, "layout", "add", "Bücher", "--html-file", html, "--default")
    assert added.returncode == 0, added.stderr
    listed = senddock(env, "layout", "list")
    assert "* " in listed.stdout and "Bücher" in listed.stdout, listed.stdout
    shown = senddock(env, "layout", "show", "bücher")  # names compare case-insensitively
    assert "{{ content }}" in shown.stdout and "Abmelden" in shown.stdout
    # A second layout of the same name is a conflict, one line.
    one_line_error(senddock(env, "layout", "add", "BÜCHER", "--html-file", html), "exists")

    body = write(tmp_path, "b.md", "# Hallo {{ subscriber.name }}\n")
    people = write(tmp_path, "p.csv", "email,name\nzoë@bücher.example,Zoë\n")
    assert senddock(env, "subscribers", "import", people, "--list", "news").returncode == 0
    made = senddock(
        env, "campaign", "create", "--name", "md", "--list", "news", "--subject", "Hi",
        "--from", "News <news@example.org>", "--markdown-file", body,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    preview = senddock(env, "campaign", "preview", made.stdout.strip(), "--to",
                       "zoë@bücher.example", "--raw")  # fmt: skip
    assert preview.returncode == 0, preview.stderr
    text, page = parts(preview.stdout.encode())
    assert "<header>Bücherpost · Zoë</header>" in page and "<h1>Hallo Zoë</h1>" in page
    assert "Hallo Zoë" in text and "Bücherpost" in text  # the text part is in the layout too

    one_line_error(senddock(env, "layout", "delete", "Bücher"), "used by 1 campaign")
    edited = write(tmp_path, "e.html", "<b>neu</b>{{ content }}{{ unsubscribe_url }}")
    done = senddock(env, "layout", "edit", "Bücher", "--html-file", edited, "--name", "Neu")
    assert done.returncode == 0, done.stderr
    assert "<b>neu</b>" in senddock(env, "layout", "show", "Neu").stdout
    one_line_error(senddock(env, "layout", "show", "Bücher"), "no layout")
    assert senddock(env, "layout", "default", "--clear").returncode == 0
    assert "* " not in senddock(env, "layout", "list").stdout


def test_a_broken_layout_is_refused_in_one_line_naming_the_line(
    db_url: str, tmp_path: Path
) -> None:
    env = worker_env(db_url, NO_SMTP)
    cases = {
        "<p>{{ content }}</p>\n<p>{% if x %}</p>\n": ["html template, line 2"],
        "<p>no slot here</p>": ["{{ content }}"],
        "{{ content }}\n{{ unsubscribe_ur }}": ["unsubscribe_ur is undefined"],
    }
    for i, (source, words) in enumerate(cases.items()):
        path = write(tmp_path, f"{i}.html", source)
        one_line_error(senddock(env, "layout", "add", f"l{i}", "--html-file", path), *words)
    assert senddock(env, "layout", "list").stdout.strip() == ""


def test_a_hostile_layout_is_stopped_by_the_sandbox_at_add(conn: Conn) -> None:
    hostile = {
        '{{ content }}{{ "x" * 10**9 }}': "may not make more than",
        "{{ content }}{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}"
        "{% endfor %}": "longer than",
        "{{ content }}{{ ''.__class__.__mro__ }}": "unsafe",
    }
    for i, (source, words) in enumerate(hostile.items()):
        started = time.monotonic()
        with pytest.raises(TemplateProblem) as refused:
            layouts.add_layout(conn, f"h{i}", source)
        assert words in refused.value.message and refused.value.field == "html_body"
        assert time.monotonic() - started < 10
    assert layouts.list_layouts(conn) == []


def test_a_campaign_with_a_layout_is_received_with_header_and_footer_around_its_markdown(
    conn: Conn, catcher: Catcher, db_url: str
) -> None:
    seed_list(conn, "news", ["zoë@bücher.example", "ada@example.com"])
    layouts.add_layout(conn, "Bücher", HTML, TEXT, default=True)
    cid = create_campaign(
        conn,
        name="md",
        list_name="news",
        subject="Hallo {{ subscriber.name }}",
        from_addr="News <news@example.org>",
        text_body=None,
        markdown_body="## Neu\n\n*{{ subscriber.name }}*, <script>alert(1)</script>\n",
    )
    conn.execute(
        "UPDATE subscribers SET name = '<script>x</script>' WHERE email = 'ada@example.com'"
    )
    bid, _, _ = broadcast(conn, cid)
    enqueue_all(conn, bid)
    with ThreadWorker(db_url, catcher.url):
        assert wait_until(lambda: unfinished(conn, bid) == 0)
    got = {r.rcpt: r.data for r in catcher.received()}
    assert set(got) == {"zoë@xn--bcher-kva.example", "ada@example.com"}
    text, page = parts(got["zoë@xn--bcher-kva.example"])
    text = text.replace("\r\n", "\n")
    assert page.index("<header>Bücherpost · Name 1</header>") < page.index("<h2>Neu</h2>")
    assert page.index("<em>Name 1</em>") < page.index('<footer><a href="http')
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>" not in page
    assert text.startswith("BÜCHERPOST\n") and "-- unsubscribe: http" in text
    assert "Neu" in text
    _, evil = parts(got["ada@example.com"])
    assert "<script>" not in evil and "&lt;script&gt;x&lt;/script&gt;" in evil


def test_subscriber_data_that_makes_a_layout_run_long_costs_only_its_own_job(
    conn: Conn, catcher: Catcher, db_url: str
) -> None:
    seed_list(conn, "news", ["zoë@bücher.example", "eve@example.com"])
    conn.execute("UPDATE subscribers SET attributes = '{\"n\": 2}'")
    conn.execute("UPDATE subscribers SET attributes = '{\"n\": 99999}' WHERE email LIKE 'eve%'")
    loop = (
        "{% for i in range(attributes.n|int) %}{% for j in range(attributes.n|int) %}{% endfor %}"
        "{% endfor %}"
    )
    layouts.add_layout(conn, "loops", "<p>" + loop + "</p>{{ content }}{{ unsubscribe_url }}")
    cid = create_campaign(
        conn, name="l", list_name="news", subject="s", from_addr="n@example.org",
        text_body=None, html_body="<p>Hi</p>", layout="loops",
    )  # fmt: skip
    bid, _, _ = broadcast(conn, cid)
    enqueue_all(conn, bid)
    with ThreadWorker(db_url, catcher.url):
        assert wait_until(lambda: unfinished(conn, bid) == 0, timeout=30)
    by = jobs(conn, bid)
    assert by["zoë@bücher.example"]["status"] == "sent"
    assert (by["eve@example.com"]["status"], by["eve@example.com"]["failure"]) == (
        "failed",
        "rejected",
    )
    assert "longer than" in str(by["eve@example.com"]["last_reply"])
    assert [r.rcpt for r in catcher.received()] == ["zoë@xn--bcher-kva.example"]


def test_layouts_api_crud_default_and_409_for_a_layout_in_use(
    conn: Conn, db_url: str, serve: ServerFactory
) -> None:
    seed_list(conn, "news", ["zoë@bücher.example"])
    token = make_token(db_url)
    with serve(workers=False) as server, server.client(token) as http:
        bad = http.post("/api/v1/layouts", json={"name": "x", "html_body": "{% if %}{{ content }}"})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "html_body"
        made = http.post("/api/v1/layouts", json={"name": "Bücher", "html_body": HTML})
        assert made.status_code == 201, made.text
        lid = made.json()["id"]
        assert http.put(f"/api/v1/layouts/{lid}/default").json()["is_default"] is True
        campaign = http.post(
            "/api/v1/campaigns",
            json={
                "name": "c",
                "lists": ["news"],
                "subject": "s",
                "from_addr": "n@example.org",
                "markdown_body": "**fett**",
            },
        )
        assert campaign.status_code == 201, campaign.text
        cid = campaign.json()["id"]
        preview = http.get(f"/api/v1/campaigns/{cid}/preview", params={"to": "zoë@bücher.example"})
        assert "<strong>fett</strong>" in preview.json()["html"]
        assert "Bücherpost" in preview.json()["html"]
        gone = http.delete(f"/api/v1/layouts/{lid}")
        assert gone.status_code == 409 and "used by 1" in gone.json()["error"]["message"]
        patched = http.patch(f"/api/v1/layouts/{lid}", json={"text_body": TEXT})
        assert patched.status_code == 200 and patched.json()["text_body"] == TEXT
        listed = http.get("/api/v1/layouts").json()
        assert [(r["name"], r["campaigns"]) for r in listed] == [("Bücher", 1)]
        unknown = http.post(
            "/api/v1/campaigns",
            json={"name": "c", "lists": ["news"], "subject": "s", "from_addr": "n@example.org",
                  "text_body": "t", "layout": "nope"},
        )  # fmt: skip
        assert unknown.status_code == 422 and unknown.json()["error"]["field"] == "layout"
        free = http.post("/api/v1/layouts", json={"name": "frei", "html_body": HTML}).json()
        assert http.delete(f"/api/v1/layouts/{free['id']}").status_code == 204


def test_a_layout_is_not_edited_under_a_broadcast_that_uses_it(conn: Conn) -> None:
    seed_list(conn, "news", ["zoë@bücher.example"])
    layouts.add_layout(conn, "Bücher", HTML, default=True)
    cid = create_campaign(
        conn, name="c", list_name="news", subject="s", from_addr="n@example.org",
        text_body="Hallo {{ subscriber.name }}",
    )  # fmt: skip
    broadcast(conn, cid)  # sending: its workers compile the layout as it is now
    with pytest.raises(layouts.LayoutInUse, match=f"campaign {cid}"):
        layouts.edit_layout(conn, "Bücher", html_body="<b>neu</b>{{ content }}")
    assert layouts.get_layout(conn, "Bücher").html_body == HTML
    assert layouts.edit_layout(conn, "Bücher", name="Post").name == "Post"  # a name is harmless
