"""Issue 39 item 2: starter layouts written in MJML, compiled by mjml-python, used as they are.

The compiled HTML is checked for what mail clients need (Outlook's conditional comments and
tables, styles inline, a phone width, a dark mode); a campaign in each starter goes through a
real worker to the SMTP catcher, for an odd recipient, and arrives whole; the CLI and the
dashboard add one; and in Chromium the gallery shows each starter and the editor's live
preview follows what is typed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from senddock.campaigns import broadcast, create_campaign, layouts, starters
from senddock.campaigns.broadcast import enqueue_all
from senddock.testing import Catcher
from support import Conn, ThreadWorker, seed_list, senddock, unfinished, wait_until, worker_env
from test_browser import chromium, chromium_path, sign_in  # noqa: F401
from test_browser_day_one import server  # noqa: F401
from test_cli_first_day import one_line_error
from test_layouts import empty_layouts, parts
from test_web_headers import signed_in
from web_support import Server

KEYS = [s.key for s in starters.STARTERS]
ODD = "zoë@bücher.example"  # the catcher sees its domain in A-labels
ODD_WIRE = "zoë@xn--bcher-kva.example"
DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture(autouse=True)
def no_layouts(db_url: str) -> Iterator[None]:
    """No layout before or after (a default left behind would wrap later tests' campaigns)."""
    empty_layouts(db_url)
    yield
    empty_layouts(db_url)


@pytest.mark.parametrize("key", KEYS)
def test_each_starter_compiles_to_html_mail_clients_take(conn: Conn, key: str) -> None:
    """What MJML is used for: without it (or with a compiler that drops them) these fail."""
    html = starters.html(key)
    assert html.count("{{ content }}") == 1  # the slot survives the compiler, once
    assert html.count("{{ unsubscribe_url }}") == 1
    assert "{% if preferences_url %}" in html  # the preferences link when one is offered
    assert html.lower().startswith("<!doctype html>")
    assert "<!--[if mso | IE]>" in html  # Outlook's own tables
    assert 'role="presentation"' in html
    assert re.search(r"max-width:\s*(600|560)px", html)  # one column, up to 600 px
    assert "@media only screen and (min-width:480px)" in html  # narrower on a phone
    assert "prefers-color-scheme: dark" in html  # a dark mode where the client has one
    assert re.search(r'<meta name="color-scheme" content="light dark"\s*/?>', html)
    # The body's own box carries its font inline: a client that drops <style> keeps it.
    slot = html.index("{{ content }}")
    assert "font-family:" in html[html.rindex("<div", 0, slot) : slot]
    layouts.check_layout(conn, f"starter {key}", html, starters.TEXT)  # a valid layout


def test_each_starter_carries_a_campaign_to_the_server_whole(
    conn: Conn, catcher: Catcher, db_url: str
) -> None:
    """A campaign in each starter, sent by a real worker: the body inside the layout, the
    unsubscribe link signed, no template syntax left, the text part readable."""
    seed_list(conn, "news", [ODD])
    conn.execute("UPDATE subscribers SET name = 'Zoë <b>Ü</b>'")
    for key in KEYS:
        starters.add(conn, key, f"Start {key}")
        cid = create_campaign(
            conn,
            name=key,
            list_name="news",
            subject=f"{key} for {{{{ subscriber.name }}}}",
            from_addr="News <news@example.org>",
            text_body=None,
            markdown_body=f"# Hallo {{{{ subscriber.name }}}}\n\nThe {key} body, *ünïcode*.\n",
            layout=f"Start {key}",
        )
        bid, _, _ = broadcast(conn, cid)
        enqueue_all(conn, bid)
    with ThreadWorker(db_url, catcher.url):
        assert wait_until(lambda: unfinished(conn, bid) == 0 and catcher.received_count() == 3)
    got = {r.message_id: r for r in catcher.received()}
    assert len(got) == 3 and {r.rcpt for r in got.values()} == {ODD_WIRE}
    for r in got.values():
        key = next(k for k in KEYS if f"The {k} body" in r.data.decode("utf-8", "replace"))
        text, page = parts(r.data)
        assert "<!--[if mso | IE]>" in page
        assert page.index(f"The {key} body, <em>ünïcode</em>.") < page.index("Unsubscribe")
        assert "Hallo Zoë &lt;b&gt;Ü&lt;/b&gt;" in page  # the name escaped, not markup
        unsubscribe = re.search(r'href="(http[^"]+)"[^>]*>Unsubscribe<', page)
        assert unsubscribe and "/unsubscribe/" in unsubscribe.group(1)
        assert "{{" not in page and "{%" not in page
        text = text.replace("\r\n", "\n")
        assert f"The {key} body" in text and "\n--\nUnsubscribe: http" in text
        assert "{{" not in text and "{%" not in text and "<" not in text.split("--")[-1]


def test_the_cli_adds_a_starter_and_refuses_a_wrong_one_in_one_line(db_url: str) -> None:
    env = worker_env(db_url, "smtp://127.0.0.1:9?tls=none")
    listed = senddock(env, "layout", "starters")
    assert listed.returncode == 0 and [ln.split()[0] for ln in listed.stdout.splitlines()] == KEYS
    added = senddock(env, "layout", "add", "Our letter", "--starter", "letter", "--default")
    assert added.returncode == 0, added.stderr
    shown = senddock(env, "layout", "show", "Our letter")
    assert "{{ content }}" in shown.stdout and "(default)" in shown.stdout
    one_line_error(senddock(env, "layout", "add", "X", "--starter", "nope"), "nope", "newsletter")
    one_line_error(senddock(env, "layout", "add", "X"), "--starter")
    again = senddock(env, "layout", "add", "Our letter", "--starter", "newsletter")
    one_line_error(again, "exists")


def test_the_gallery_uses_a_starter_and_the_editor_previews_what_is_typed(
    chromium_path: str,  # noqa: F811
    server: Server,  # noqa: F811
    conn: Conn,
) -> None:
    """In Chromium: each starter's thumbnail shows a sample body; "Use this layout" stores it
    and opens the editor, whose preview follows an edit; saving keeps the edit. Screenshots
    of the gallery and the editor at desktop and phone width go to docs/."""
    problems: list[str] = []
    with chromium(chromium_path, problems, {"width": 1280, "height": 1100}) as page:
        sign_in(page, server, "/layouts")
        page.get_by_role("heading", name="Start from a layout").wait_for()
        for key in KEYS:
            thumb = page.frame_locator(f"[data-starter={key}] iframe")
            thumb.get_by_text("A headline for this issue").wait_for()
        page.screenshot(path=str(DOCS / "layouts-gallery.png"))
        card = page.locator("[data-starter=announcement]")
        card.locator("input[name=name]").fill("Launch día")
        card.get_by_role("button", name="Use this layout").click()
        page.get_by_role("heading", name="Layout Launch día").wait_for()
        preview = page.frame_locator("iframe[name=preview]")
        preview.get_by_text("Something new").wait_for()
        html = page.locator("textarea[name=html_body]")
        html.fill(html.input_value().replace("Something new", "Größer als je"))
        preview.get_by_text("Größer als je").wait_for()  # the preview followed the edit
        page.screenshot(path=str(DOCS / "layout-editor.png"))
        page.set_viewport_size({"width": 390, "height": 1100})
        page.screenshot(path=str(DOCS / "layout-editor-phone.png"))
        page.get_by_role("button", name="Save layout").click()
        page.get_by_role("heading", name="Layouts").wait_for()
    assert not problems, problems
    row = layouts.get_layout(conn, "Launch día")
    assert "Größer als je" in row.html_body and "Something new" not in row.html_body


def test_the_starter_routes_answer_as_the_dashboard_does(
    server: Server,  # noqa: F811
    conn: Conn,
) -> None:
    """Without a session nothing; a preview is a sandboxed document; a use adds the layout."""
    with httpx.Client(base_url=server.url, follow_redirects=False) as anon:
        assert anon.get("/layouts/starters/letter/preview").status_code in (302, 303, 401)
    with signed_in(server.url) as c:
        page = c.get("/layouts").text
        preview = c.get("/layouts/starters/letter/preview")
        assert preview.status_code == 200 and "A headline for this issue" in preview.text
        assert preview.headers["content-security-policy"].startswith("sandbox")
        assert c.get("/layouts/starters/nope/preview").status_code == 404
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf
        used = c.post("/layouts/starters/newsletter", data={"csrf": csrf.group(1), "name": ""})
        assert used.status_code == 303
        row = layouts.get_layout(conn, "Newsletter")  # its title, when no name is given
        assert used.headers["location"] == f"/layouts/{row.id}"
        bad = c.post("/layouts/preview", data={"csrf": csrf.group(1), "html_body": "<p>x</p>"})
        assert bad.status_code == 200 and "{{ content }}" in bad.text and 'role="alert"' in bad.text
        forged = c.post("/layouts/starters/letter", data={"csrf": "forged", "name": "L"})
        assert forged.status_code in (400, 403)
    assert [r.name for r in layouts.list_layouts(conn)] == ["Newsletter"]
