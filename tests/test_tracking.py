"""Issue 37, end to end: a tracked campaign sent by a real worker to the aiosmtpd catcher, its
links and pixel followed with httpx against a real `senddock serve`, the figures read from
`senddock campaign status --json`. Each test says what it catches."""

from __future__ import annotations

import asyncio
import email
import email.policy
import json
import re
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

from senddock.campaigns import broadcast, create_campaign, track_for
from senddock.campaigns.compose import link_key
from senddock.config import Settings
from senddock.messages import sign
from senddock.messages.tracking import CLICK, OPEN
from senddock.testing import Catcher
from senddock.tracking import Event, EventWriter
from support import Conn, ThreadWorker, seed_list, senddock, unfinished, wait_until, worker_env
from web_support import Server, ServerFactory, make_token, servers, start_server

ZOE = "zoë@bücher.example"
ZOE_WIRE = "zoë@xn--bcher-kva.example"  # what the relay sees (IDNA A-label)
ADA = "ada@example.com"
PEOPLE = [ZOE, ADA, "grace@example.com"]

A = "https://example.org/a?x=1&y=2"
B_WRITTEN = "https://bücher.example/straße"
B = "https://xn--bcher-kva.example/stra%C3%9Fe"
HTML = (
    "<html><body><p>Hi {{ subscriber.name }}</p>"
    '<p><a href="https://example.org/a?x=1&amp;y=2">Read A</a></p>'
    f'<p><a href="{B_WRITTEN}">Read B</a></p>'
    '<p><a href="mailto:news@example.org">Write to us</a></p>'
    '<p><a href="{{ preferences_url }}">Your lists</a>'
    ' <a href="{{ unsubscribe_url }}">Unsubscribe</a></p>'
    "</body></html>"
)


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    yield from servers(db_url)


def tracked_campaign(conn: Conn, track: str = "opens,clicks", name: str = "c") -> int:
    return create_campaign(
        conn,
        name=name,
        list_name="news",
        subject="Hi {{ subscriber.name }}",
        from_addr="News <news@example.org>",
        text_body=None,
        html_body=HTML,
        layout="none",
        track=track,
    )


def seed(conn: Conn) -> None:
    seed_list(conn, "news", PEOPLE)
    conn.execute("UPDATE subscribers SET name = 'Zoë Bücher' WHERE email = %s", (ZOE,))


def send(
    conn: Conn, db_url: str, catcher: Catcher, server: Server, cid: int, read_later: bool = True
) -> int:
    """Send campaign `cid` to everyone with a real worker; its broadcast id. `read_later`:
    the deliveries are moved a minute back, as if people read their mail a minute after it
    came (past the prefetch window, tracking/events.py); False: it has just arrived."""
    bid, _, _ = broadcast(conn, cid)
    with ThreadWorker(db_url, catcher.url, public_url=server.url):
        assert catcher.wait_for(len(PEOPLE), timeout=60)
        assert wait_until(lambda: unfinished(conn, bid) == 0)
    if read_later:
        conn.execute(
            "UPDATE broadcast_jobs SET sent_at = sent_at - interval '1 minute'"
            " WHERE broadcast_id = %s",
            (bid,),
        )
    return bid


def parts(catcher: Catcher, wire: str) -> tuple[str, str]:
    """(text, HTML) of the message `wire` received."""
    got = next(r for r in catcher.received() if r.rcpt == wire)
    msg = email.message_from_bytes(got.data, policy=email.policy.default)
    text, html = msg.get_body(("plain",)), msg.get_body(("html",))
    assert text is not None and html is not None
    return str(text.get_content()), str(html.get_content())


def hrefs(html: str) -> list[str]:
    return re.findall(r'href="([^"]*)"', html)


def events(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) AS n FROM track_events").fetchone()
    assert row is not None
    return int(row["n"])


def status(db_url: str, cid: int) -> dict[str, Any]:
    done = senddock(
        worker_env(db_url, "smtp://127.0.0.1:1"), "campaign", "status", str(cid), "--json"
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def path_of(server: Server, url: str) -> str:
    assert url.startswith(server.url + "/"), url
    return url[len(server.url) :]


def test_a_tracked_message_redirects_counts_people_once_and_machines_apart(
    db_url: str, conn: Conn, catcher: Catcher, serve: ServerFactory
) -> None:
    # Catches: a redirect to anything but the URL the message was written with (IDNA and
    # entities included); unsubscribe, preference or mailto links sent through the redirect;
    # repeated clicks counted as more people; a HEAD (a scanner) counted as a person; a pixel
    # that a cache could answer instead of us; figures in `status --json` off by any amount.
    seed(conn)
    server = serve(workers=False)
    cid = tracked_campaign(conn)
    send(conn, db_url, catcher, server, cid)

    text, html = parts(catcher, ZOE_WIRE)
    links = hrefs(html)
    tracked = [u for u in links if u.startswith(server.url + "/r/")]
    assert len(tracked) == 2
    assert "mailto:news@example.org" in links
    assert any(u.startswith(server.url + "/unsubscribe/") for u in links)
    assert any(u.startswith(server.url + "/preferences/") for u in links)
    assert "Zoë Bücher" in html
    assert "example.org/a" not in html and "bücher.example" not in html
    in_text = re.findall(r"\((http[^)\s]+)\)", text)
    assert in_text[:2] == tracked  # the text part names the same two links, signed alike
    assert any("/unsubscribe/" in u for u in in_text)
    pixel = re.search(r'<img src="([^"]+)"', html)
    assert pixel is not None and pixel.group(1).startswith(server.url + "/o/")

    _, ada_html = parts(catcher, ADA)
    ada_a = next(u for u in hrefs(ada_html) if u.startswith(server.url + "/r/"))
    assert ada_a != tracked[0]  # each recipient's own token

    with server.client() as client:
        for _ in range(3):
            went = client.get(path_of(server, tracked[0]))
            assert went.status_code == 302 and went.headers["location"] == A
            assert "no-store" in went.headers["cache-control"]
        went = client.get(path_of(server, tracked[1]))
        assert went.status_code == 302 and went.headers["location"] == B
        assert client.get(path_of(server, ada_a)).headers["location"] == A
        scanned = client.head(path_of(server, tracked[1]))
        assert scanned.status_code == 302 and scanned.headers["location"] == B
        for _ in range(2):
            img = client.get(path_of(server, pixel.group(1)))
            assert img.status_code == 200 and img.headers["content-type"] == "image/gif"
            assert img.content.startswith(b"GIF89a") and "no-store" in img.headers["cache-control"]
        assert client.head(path_of(server, pixel.group(1))).status_code == 200

    assert wait_until(lambda: events(conn) == 9, timeout=10)
    row = conn.execute(
        "SELECT machine, why, user_agent FROM track_events WHERE machine ORDER BY id"
    ).fetchall()
    assert [(r["machine"], r["why"]) for r in row] == [(True, "HEAD request")] * 2
    assert all(r["user_agent"].startswith("python-httpx") for r in row)

    st = status(db_url, cid)
    figures = {
        k: st[k] for k in ("track", "opened", "clicked", "opened_machine", "clicked_machine")
    }
    assert figures == {
        "track": "opens,clicks",
        "opened": 1,
        "clicked": 2,
        "opened_machine": 1,
        "clicked_machine": 1,
    }
    assert (st["opens"], st["clicks"]) == (2, 5)
    assert (st["opens_machine_events"], st["clicks_machine_events"]) == (1, 1)
    assert st["links"] == [
        {"url": A, "clicks": 4, "unique": 2, "machine": 0},
        {"url": B, "clicks": 1, "unique": 1, "machine": 1},
    ]
    shown = senddock(worker_env(db_url, "smtp://127.0.0.1:1"), "campaign", "status", str(cid))
    assert "tracking opens and clicks: opened 1, clicked 2" in shown.stdout
    assert f"4 clicks by 2 people (0 machine)  {A}" in shown.stdout


def test_a_tampered_or_foreign_token_gets_404_and_records_nothing(
    db_url: str, conn: Conn, catcher: Catcher, serve: ServerFactory
) -> None:
    # Catches: an open redirect (a URL taken from the request), a token of one broadcast
    # reaching another's link, a changed character accepted, and an event written for any of
    # them (the valid click last proves the writer was running: the others were not merely late).
    seed(conn)
    server = serve(workers=False)
    cid = tracked_campaign(conn)
    bid = send(conn, db_url, catcher, server, cid)
    _, html = parts(catcher, ADA)
    good = path_of(server, next(u for u in hrefs(html) if "/r/" in u))
    pixel = re.search(r'<img src="([^"]+)"', html)
    assert pixel is not None
    key = link_key(conn, Settings(database_url=db_url))
    sub, _, link = (int(p) for p in good.rsplit("/", 1)[1].split(".")[:3])
    flipped = good[:-1] + ("A" if good[-1] != "A" else "B")
    other = tracked_campaign(conn, name="other")
    other_bid, _, _ = broadcast(conn, other)
    bad = [
        flipped,
        good.replace(f"/r/{sub}.", f"/r/{sub + 1}."),  # someone else, same mac
        "/r/" + sign(key, CLICK, sub, bid, link + 1000),  # signed, no such link
        "/r/" + sign(key, CLICK, sub, other_bid, link),  # signed, the link of another broadcast
        "/r/" + sign(key, OPEN, sub, bid),  # an open's token as a click
        "/r/https%3A%2F%2Fevil.example%2F",
        "/r/" + sign(key, "unsubscribe", sub, cid),
        path_of(server, pixel.group(1))[:-2] + "xx",
        "/o/" + sign(key, CLICK, sub, bid, link),
    ]
    with server.client() as client:
        for path in bad:
            answer = client.get(path)
            assert answer.status_code == 404, (path, answer.status_code)
            assert "location" not in answer.headers
        assert client.get(good).status_code == 302
    assert wait_until(lambda: events(conn) >= 1, timeout=10)
    rows = conn.execute("SELECT subscriber_id, broadcast_id, link_id FROM track_events").fetchall()
    assert [(r["subscriber_id"], r["broadcast_id"], r["link_id"]) for r in rows] == [
        (sub, bid, link)
    ]


def test_tracking_is_off_by_default_and_set_by_cli_api_and_the_setting(
    db_url: str, conn: Conn, catcher: Catcher, serve: ServerFactory, tmp_path: Any
) -> None:
    # Catches: tracking on without being asked (a privacy promise broken), SENDDOCK_TRACK not
    # applied at create, `--track` / the API's `track` not stored, an edit of a sent campaign's
    # tracking accepted (its messages are already out), an untracked message rewritten.
    seed(conn)
    server = serve(workers=False)
    html_file = tmp_path / "body.html"
    html_file.write_text(HTML)
    env = worker_env(db_url, "smtp://127.0.0.1:1")
    base = ["campaign", "create", "--list", "news", "--subject", "S"]
    base += ["--from", "News <news@example.org>", "--html-file", str(html_file)]

    names = iter(range(100))

    def created(*extra: str, **more_env: str) -> int:
        done = senddock({**env, **more_env}, *base, "--name", f"n{next(names)}", *extra)
        assert done.returncode == 0, done.stderr
        return int(done.stdout)

    def track_of(cid: int) -> str:
        row = conn.execute("SELECT track FROM campaigns WHERE id = %s", (cid,)).fetchone()
        assert row is not None
        return str(row["track"])

    plain = created()
    assert track_of(plain) == ""
    assert track_of(created("--track", "clicks")) == "clicks"
    assert track_of(created(SENDDOCK_TRACK="opens,clicks")) == "opens,clicks"
    assert track_of(created("--track", "none", SENDDOCK_TRACK="both")) == ""
    typo = senddock(env, *base, "--name", "typo", "--track", "opnes")
    assert typo.returncode != 0 and "opnes" in typo.stderr
    edited = senddock(env, "campaign", "edit", str(plain), "--track", "opens")
    assert edited.returncode == 0 and "track" in edited.stdout
    assert track_of(plain) == "opens"
    senddock(env, "campaign", "edit", str(plain), "--track", "none")

    token = make_token(db_url)
    body = {
        "name": "api",
        "lists": ["news"],
        "subject": "S",
        "from_addr": "News <news@example.org>",
        "html_body": HTML,
    }
    with server.client(token) as api:
        made = api.post("/api/v1/campaigns", json={**body, "track": "both"})
        assert made.status_code == 201, made.text
        assert made.json()["track"] == "opens,clicks" and made.json()["links"] == []
        changed = api.patch(f"/api/v1/campaigns/{made.json()['id']}", json={"track": "opens"})
        assert changed.status_code == 200 and changed.json()["track"] == "opens"
        assert api.post("/api/v1/campaigns", json={**body, "track": "x"}).status_code == 422

    send(conn, db_url, catcher, server, plain)
    text, html = parts(catcher, ADA)
    assert "/r/" not in html + text and "/o/" not in html and "<img" not in html
    assert 'href="https://example.org/a?x=1&amp;y=2"' in html
    late = senddock(env, "campaign", "edit", str(plain), "--track", "clicks")
    assert late.returncode != 0 and "fixed once it has been sent" in late.stderr
    st = status(db_url, plain)
    assert (st["track"], st["opened"], st["clicked"], st["links"]) == ("", 0, 0, [])
    assert "tracking" not in senddock(env, "campaign", "status", str(plain)).stdout


async def test_events_wait_while_postgres_is_away_and_land_when_it_is_back(
    db_url: str, conn: Conn
) -> None:
    # Catches: events dropped when a batch fails (the late-not-lost promise), a batch written
    # twice after a retry, and a buffer that grows without bound.
    seed(conn)
    bid, _, _ = broadcast(conn, tracked_campaign(conn))
    sub = conn.execute("SELECT id FROM subscribers WHERE email = %s", (ADA,)).fetchone()
    assert sub is not None
    writer = EventWriter("postgresql://nobody@127.0.0.1:1/none", bound=5)
    now = datetime.now(UTC)
    for _ in range(7):
        writer.add(Event("open", bid, int(sub["id"]), None, now, "test"))
    assert (len(writer.buffer), writer.dropped) == (5, 2)
    assert await writer.flush() is False  # Postgres "away": refused, the batch kept
    assert len(writer.buffer) == 5 and events(conn) == 0
    writer.url = db_url  # back
    task = asyncio.create_task(writer.run())
    try:
        for _ in range(100):
            if events(conn) == 5:
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert events(conn) == 5 and not writer.buffer and writer.written == 5


def test_an_anonymous_campaign_counts_events_and_names_nobody(
    db_url: str, conn: Conn, catcher: Catcher, serve: ServerFactory
) -> None:
    # Catches: an anonymous campaign whose links still name their recipient (each message's
    # URLs differ), an event row that names a person, and people counted where none are known.
    seed(conn)
    server = serve(workers=False)
    cid = tracked_campaign(conn, track="both,anonymous")
    send(conn, db_url, catcher, server, cid)
    _, zoe = parts(catcher, ZOE_WIRE)
    _, ada = parts(catcher, ADA)
    zoe_links = [u for u in hrefs(zoe) if "/r/" in u]
    assert zoe_links == [u for u in hrefs(ada) if "/r/" in u] and len(zoe_links) == 2
    pixel = re.search(r'<img src="([^"]+)"', zoe)
    assert pixel is not None and pixel.group(1) in ada
    with server.client() as client:
        for _ in range(3):
            assert client.get(path_of(server, zoe_links[0])).headers["location"] == A
        assert client.get(path_of(server, pixel.group(1))).status_code == 200
    assert wait_until(lambda: events(conn) == 4, timeout=10)
    named = conn.execute("SELECT count(subscriber_id) AS n FROM track_events").fetchone()
    assert named == {"n": 0}
    st = status(db_url, cid)
    assert st["track"] == "opens,clicks,anonymous"
    assert (st["opened"], st["clicked"], st["opens"], st["clicks"]) == (None, None, 1, 3)
    assert st["links"][0] == {"url": A, "clicks": 3, "unique": None, "machine": 0}


def test_the_settings_give_the_default_and_the_anonymous_floor() -> None:
    # Catches: SENDDOCK_TRACK ignored when nobody says, or overriding what a person said;
    # SENDDOCK_TRACK_ANONYMOUS not applied to an explicit choice.
    assert track_for(None, Settings()) == ""
    assert track_for(None, Settings(track="both")) == "opens,clicks"
    assert track_for("none", Settings(track="both")) == ""
    assert track_for("clicks", Settings(track_anonymous=True)) == "clicks,anonymous"
    assert track_for(None, Settings(track="opens", track_anonymous=True)) == "opens,anonymous"
    assert track_for("none", Settings(track_anonymous=True)) == ""


class Gate:
    """A TCP front for the test's Postgres that a test can shut: while shut, every connection
    through it is closed at once, as a Postgres that went away would close them."""

    def __init__(self, db_url: str) -> None:
        info = conninfo_to_dict(db_url)
        self.host, self.port = str(info.get("host") or "localhost"), int(info.get("port") or 5432)
        self.user, self.dbname = str(info.get("user") or "postgres"), str(info["dbname"])
        self.password = str(info.get("password") or "")
        self.is_open = True
        self.streams: set[asyncio.StreamWriter] = set()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.listen_port = 0

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.listen_port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()
        server.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.is_open:
            writer.close()
            return
        if self.host.startswith("/"):
            path = f"{self.host}/.s.PGSQL.{self.port}"
            up_reader, up_writer = await asyncio.open_unix_connection(path)
        else:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        self.streams |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    @property
    def url(self) -> str:
        secret = f":{self.password}" if self.password else ""
        return (
            f"postgresql://{self.user}{secret}@127.0.0.1:{self.listen_port}/{self.dbname}"
            "?sslmode=disable"
        )

    def shut(self) -> None:
        def close_all() -> None:
            self.is_open = False
            for stream in self.streams:
                stream.close()
            self.streams.clear()

        self.loop.call_soon_threadsafe(close_all)

    def reopen(self) -> None:
        self.loop.call_soon_threadsafe(setattr, self, "is_open", True)

    def __enter__(self) -> Gate:
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def test_clicks_are_answered_while_postgres_is_away_and_recorded_once_it_is_back(
    db_url: str, conn: Conn, catcher: Catcher
) -> None:
    # Catches: a redirect or pixel that waits for (or fails without) Postgres, and events lost
    # or written twice across an outage of `serve`'s database (the late-not-lost promise).
    seed(conn)
    with Gate(db_url) as gate:
        server = start_server(gate.url, "smtp://127.0.0.1:1", workers=False)
        try:
            cid = tracked_campaign(conn)
            send(conn, db_url, catcher, server, cid)
            _, html = parts(catcher, ADA)
            link = path_of(server, next(u for u in hrefs(html) if "/r/" in u))
            pixel = re.search(r'<img src="([^"]+)"', html)
            assert pixel is not None
            with server.client() as client:
                assert client.get(link).status_code == 302  # this process now knows the link
                assert wait_until(lambda: events(conn) == 1, timeout=10)
                gate.shut()
                started = time.monotonic()
                for _ in range(5):
                    went = client.get(link)
                    assert went.status_code == 302 and went.headers["location"] == A
                assert client.get(path_of(server, pixel.group(1))).status_code == 200
                took = time.monotonic() - started
                time.sleep(1.0)
                assert events(conn) == 1  # nothing could be written meanwhile
                gate.reopen()
            assert took < 3.0, took  # answered without Postgres (6 requests)
            assert wait_until(lambda: events(conn) == 7, timeout=20), events(conn)
            time.sleep(0.5)
            assert events(conn) == 7  # each once
            assert "events wait for the database" in server.text()
        finally:
            server.stop()
            print(server.text())
