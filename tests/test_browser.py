"""The dashboard in a real headless Chromium: sign in, import a list, create and send a
campaign, and watch its progress bar reach 100 % over Server-Sent Events, with no reload.

Needs Debian's chromium (/usr/bin/chromium; .ci/run installs it). Without it the test skips,
unless SENDDOCK_REQUIRE_BROWSER is set (CI), where a missing browser fails. Screenshots go to
artifacts/browser/; with SENDDOCK_DOCS_SCREENSHOT=1 the mid-send one is also written to
docs/dashboard.png for the README.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Page, Route, ViewportSize, expect, sync_playwright

from senddock.testing import Catcher, Fault
from senddock.web import auth
from support import Conn, send_campaign
from web_support import Server, start_server

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts" / "browser"
DOCS_SHOT = ROOT / "docs" / "dashboard.png"
EMAIL, PASSWORD = "admin@example.org", "correct horse battery staple"
PEOPLE = [f"reader{i:02}@example.org" for i in range(50)]
BAR = ".progress-block [role=progressbar]"
# Each message takes this long at the server, so a send lasts a few seconds and can be watched.
STALL = 0.25


@pytest.fixture
def chromium_path() -> str:
    if not CHROMIUM.exists():
        if os.environ.get("SENDDOCK_REQUIRE_BROWSER"):
            pytest.fail(f"{CHROMIUM} is missing and SENDDOCK_REQUIRE_BROWSER is set")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    return str(CHROMIUM)


@pytest.fixture
def slow_catcher() -> Iterator[Catcher]:
    """A real SMTP server that takes STALL seconds to accept each message."""
    with Catcher(lambda _: Fault.stall(STALL, attempts=None)) as catcher:
        yield catcher


@pytest.fixture
def server(db_url: str, conn: Conn, slow_catcher: Catcher) -> Iterator[Server]:
    auth.create_admin(conn, EMAIL, PASSWORD)
    srv = start_server(db_url, slow_catcher.url, args=("--concurrency", "2"))
    yield srv
    srv.stop()
    print(srv.text())


def progress(page: Page) -> int:
    return int(page.get_attribute(BAR, "aria-valuenow") or "0")


def test_browser_signs_in_imports_sends_and_watches_progress_reach_100(
    chromium_path: str, server: Server, slow_catcher: Catcher, tmp_path: Path
) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    people = tmp_path / "people.csv"
    people.write_text("email,name\n" + "".join(f"{a},Reader {a[6:8]}\n" for a in PEOPLE))
    problems: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path)
        page = browser.new_page(viewport={"width": 1200, "height": 1000})
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("dialog", lambda dialog: dialog.accept())
        page.set_default_timeout(20_000)

        # Every page needs a login: the browser lands on the form.
        page.goto(server.url + "/")
        assert page.url.startswith(server.url + "/login")
        page.get_by_label("Email").fill(EMAIL)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("heading", name="Campaigns").wait_for()

        # Import through the form; the import page follows the job until it is done.
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Lists").click()
        page.fill("input[name=list_name]", "readers")
        page.set_input_files("input[name=file]", str(people))
        page.get_by_role("button", name="Import").click()
        page.wait_for_selector("[data-import] .badge[data-status=done]")
        assert page.text_content("[data-field=imported]") == "50"

        # A new campaign through the form, then Send on its page.
        page.goto(server.url + "/campaigns/new")
        page.fill("input[name=name]", "Browser test")
        page.get_by_label("readers").check()
        page.fill("input[name=from_addr]", "News <news@example.org>")
        page.fill("input[name=subject]", "Hello {{ subscriber.name }}")
        page.fill("textarea[name=text_body]", "Hi {{ subscriber.name }}, this is {{ email }}.")
        page.get_by_role("button", name="Save draft").click()
        page.get_by_role("button", name="Send").click()
        page.wait_for_selector(".badge[data-status=sending]")
        # Marks this document: if the page reloaded, the mark would be gone.
        page.evaluate("window.notReloaded = true")

        # The bar moves without reload; catch it mid-send, then at 100 %.
        page.wait_for_function(
            f"() => {{ const v = +document.querySelector('{BAR}').getAttribute('aria-valuenow');"
            " return v > 0 && v < 100; }"
        )
        middle = progress(page)
        page.screenshot(path=str(ARTIFACTS / "campaign-sending.png"), full_page=True)
        if os.environ.get("SENDDOCK_DOCS_SCREENSHOT"):
            # For the README: once the chart has drawn a bar, while the bar is still moving.
            page.wait_for_selector(".chart rect.bar:not([height='0.0'])")
            assert progress(page) < 100, "the send finished before the chart was drawn"
            page.screenshot(path=str(DOCS_SHOT))
        page.wait_for_function(
            f"() => document.querySelector('{BAR}').getAttribute('aria-valuenow') === '100'",
            timeout=60_000,
        )
        page.wait_for_selector(".campaign .badge[data-status=sent]", timeout=30_000)
        assert page.evaluate("window.notReloaded") is True
        assert page.text_content(".stats [data-field=sent]") == "50"
        page.screenshot(path=str(ARTIFACTS / "campaign-sent.png"), full_page=True)

        # Usable at phone width: nothing wider than the screen.
        page.set_viewport_size({"width": 390, "height": 844})
        page.reload()
        wide = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        page.screenshot(path=str(ARTIFACTS / "campaign-phone.png"), full_page=True)
        browser.close()

    assert 0 < middle < 100
    assert wide <= 0, f"the page is {wide}px wider than a phone screen"
    assert slow_catcher.delivered_once(PEOPLE), slow_catcher.duplicates()
    assert sorted(r.rcpt for r in slow_catcher.received()) == PEOPLE
    assert problems == []


# -- a phone, a cancelled campaign and the API docs, on rows set directly (no workers) -------

LONG_REPLY = (
    "Requested action not taken: mailbox unavailable; the recipient's server says that "
    "this address has been disabled for inactivity and asks the sender to remove it from "
    "every list and not to try again, see https://support.example.net/postmaster/5.1.1 "
)
PHONE: ViewportSize = {"width": 390, "height": 844}


@pytest.fixture
def still_server(db_url: str, conn: Conn) -> Iterator[Server]:
    """The dashboard without workers: rows stay as a test sets them."""
    auth.create_admin(conn, EMAIL, PASSWORD)
    srv = start_server(db_url, "smtp://127.0.0.1:1", workers=False)
    yield srv
    srv.stop()
    print(srv.text())


@contextmanager
def chromium(
    path: str, problems: list[str], viewport: ViewportSize | None = None
) -> Iterator[Page]:
    """A page in a new headless Chromium: its script errors go to `problems`, dialogs are
    accepted, and nothing waits more than 20 s."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path)
        page = browser.new_page(viewport=viewport or {"width": 1200, "height": 1000})
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        page.on("dialog", lambda dialog: dialog.accept())
        page.set_default_timeout(20_000)
        yield page
        browser.close()


def sign_in(page: Page, server: Server, path: str) -> None:
    """Open `path`, which lands on the login form, and sign in: back on `path`."""
    page.goto(server.url + path)
    page.get_by_label("Email").fill(EMAIL)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(server.url + path)


def test_on_a_phone_a_recipient_row_with_a_long_reply_stays_one_or_two_lines(
    chromium_path: str, still_server: Server, conn: Conn
) -> None:
    """The reply is cut with an ellipsis (whole in its title; a tap shows it all): with
    `overflow-wrap: anywhere` the row was ~260 px tall at 390 px wide."""
    cid, bid = send_campaign(conn, "news", ["ada@example.org", "bob@example.org"])
    conn.execute(
        "UPDATE broadcast_jobs SET status = 'failed', failure = 'bounced', attempts = 1,"
        " last_code = 550, last_enhanced = '5.1.1', last_reply = %s WHERE broadcast_id = %s",
        (LONG_REPLY, bid),
    )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path)
        page = browser.new_page(viewport=PHONE)
        page.set_default_timeout(20_000)
        sign_in(page, still_server, f"/campaigns/{cid}")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "recipients-phone.png"), full_page=True)
        row = page.locator("section[aria-label=Recipients] tbody tr").first
        height = row.bounding_box()["height"]  # type: ignore[index]
        assert height < 80, f"a recipient row is {height:.0f} px tall on a phone"
        clip = row.locator("td.reply .clip")
        title = clip.get_attribute("title")
        clip.click()  # a tap: the whole reply
        opened = row.bounding_box()["height"]  # type: ignore[index]
        wide = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        browser.close()
    assert title == f"550 5.1.1 {LONG_REPLY}".strip()
    assert opened > height
    assert wide <= 0, f"the page is {wide}px wider than a phone screen"


def test_a_cancelled_campaign_shows_a_grey_bar_and_its_counts(
    chromium_path: str, still_server: Server, conn: Conn
) -> None:
    cid, bid = send_campaign(conn, "news", [f"r{i:02}@example.org" for i in range(25)])
    conn.execute(
        "UPDATE broadcast_jobs SET status = 'sent', sent_at = now() WHERE id IN"
        " (SELECT id FROM broadcast_jobs WHERE broadcast_id = %s ORDER BY id LIMIT 8)",
        (bid,),
    )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path)
        page = browser.new_page(viewport={"width": 1200, "height": 1000})
        page.set_default_timeout(20_000)
        page.on("dialog", lambda dialog: dialog.accept())
        sign_in(page, still_server, f"/campaigns/{cid}")
        page.get_by_role("button", name="Cancel").click()
        page.wait_for_selector(".campaign .badge[data-status=cancelled]")
        line = page.locator(".progress-block .big:visible").inner_text()
        fill = page.eval_on_selector(f"{BAR} > span", "e => getComputedStyle(e).backgroundColor")
        done = page.eval_on_selector(":root", "e => getComputedStyle(e).getPropertyValue('--ok')")
        page.goto(still_server.url + "/")
        listed = page.locator(f"[data-campaign='{cid}'] .bar-cell .sub:visible").inner_text()
        browser.close()
    assert line == "Cancelled · 8 sent · 17 cancelled of 25"
    assert fill != "rgb(31, 122, 77)" and done.strip() == "#1f7a4d", fill  # not done green
    assert listed == "32 % sent · 17 cancelled"


def test_jobs_turning_unconfirmed_show_on_an_open_campaign_page_without_a_reload(
    chromium_path: str, still_server: Server, conn: Conn, db_url: str
) -> None:
    """Issue 23: a worker dies after its final dots while someone watches the campaign; the
    unconfirmed block appears and lists the jobs over the live updates."""
    from test_unconfirmed_surfaces import RELAY, unconfirm

    cid, _ = send_campaign(conn, "news", ["ünï@example.org", "zoë@bücher.example"])
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path)
        page = browser.new_page()
        page.set_default_timeout(20_000)
        sign_in(page, still_server, f"/campaigns/{cid}")
        assert page.locator("[data-unconfirmed]").is_hidden()
        # Playwright's sync API runs an event loop in this thread: unconfirm's own runs apart.
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(unconfirm, db_url, 2).result()
        page.wait_for_selector("[data-unconfirmed]:not([hidden])")
        page.wait_for_function(
            "document.querySelectorAll('[data-unconfirmed-jobs] tr').length === 2"
        )
        rows = page.locator("[data-unconfirmed-jobs] tr").all_inner_texts()
        # The sentence and the one resend button ("Resend the 2 still unconfirmed") both say it,
        # once the update that brought the rows has reached them too (they are filled apart).
        counted = page.locator("[data-unconfirmed] [data-field=unconfirmed]")
        expect(counted).to_have_text(["2", "2"])  # retried without eval (the page's CSP)
        counts = counted.all_inner_texts()
        browser.close()
    assert counts == ["2", "2"]
    assert sorted(r.split("\t")[0] for r in rows) == sorted(str(j.id) for j in held)
    assert all(RELAY in r for r in rows), rows


def test_the_api_docs_page_renders_with_no_request_to_another_host(
    chromium_path: str, still_server: Server
) -> None:
    """Swagger UI in a browser that may reach only this server draws the SendDock API from
    the files this server serves."""
    elsewhere: list[str] = []
    problems: list[str] = []  # a script or style the page's CSP refused shows up here
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path)
        context = browser.new_context()

        def only_here(route: Route) -> None:
            if route.request.url.startswith(still_server.url + "/"):
                route.continue_()
            else:
                elsewhere.append(route.request.url)
                route.abort()

        context.route("**/*", only_here)
        page = context.new_page()
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.set_default_timeout(20_000)
        sign_in(page, still_server, "/docs")
        page.locator(".swagger-ui .info .title", has_text="SendDock").wait_for()
        page.locator(".opblock", has_text="/api/v1/campaigns").first.wait_for()
        page.locator(".opblock-summary", has_text="/api/v1/campaigns").first.click()
        page.locator(".opblock-body").first.wait_for()
        browser.close()
    assert elsewhere == []
    assert problems == []
