"""Bodies through a real `senddock serve` process over real sockets: nobody makes the server
read a body it will refuse, and no body is larger than its cap (web/guard.py, issue 19.4).

Each 100 MB body is sent in full over a raw socket (unless the server answers first) while a
thread samples the serve process's VmRSS; the server must answer 401 or 413 and grow < 10 MB.
Before the guard an unauthenticated 100 MB JSON to /api/v1/campaigns grew it by ~200 MB.
"""

from __future__ import annotations

import contextlib
import re
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest

from senddock.campaigns.compose import link_key
from senddock.config import Settings
from senddock.messages import UNSUBSCRIBE, sign
from support import Conn, seed_list, wait_until
from web_support import Server, ServerFactory, make_admin, make_token, servers

MB = 1024 * 1024
HUNDRED_MB = 100 * MB
MAX_GROWTH = 10 * MB


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    yield from servers(db_url)


def rss(pid: int) -> int:
    """Resident set size of process `pid` in bytes (/proc/PID/status VmRSS)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


class RssPeak:
    """The highest VmRSS of a process while the block runs, sampled every 5 ms."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.before = 0
        self.peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, rss(self.pid))
            time.sleep(0.005)

    @property
    def growth(self) -> int:
        return self.peak - self.before

    def __enter__(self) -> RssPeak:
        self.before = self.peak = rss(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        time.sleep(0.3)  # memory still held after the answer counts too
        self._done.set()
        self._thread.join()
        print(f"serve RSS {self.before / MB:.1f} MB, peak +{self.growth / MB:.1f} MB")


@dataclass
class Answer:
    status: int
    head: str
    body: bytes
    sent: int  # body bytes the server took before it answered


def post_raw(
    server: Server,
    path: str,
    size: int,
    content_type: str,
    headers: dict[str, str] | None = None,
    *,
    chunked: bool = False,
    prefix: bytes = b"",
) -> Answer:
    """POST a `size`-byte body (`prefix`, then filler) and read the answer; stop sending when
    the server answers or closes. With `chunked`, no Content-Length is announced."""
    where = urlsplit(server.url)
    lines = [f"POST {path} HTTP/1.1", f"Host: {where.netloc}", f"Content-Type: {content_type}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    lines.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}")
    sock = socket.create_connection((where.hostname, where.port), timeout=60)
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    piece = b"a" * (256 * 1024)
    sent = 0
    reply = b""
    while sent < size:
        readable, writable, _ = select.select([sock], [sock], [], 30)
        if readable:
            break  # an answer (or a close) before the whole body
        if writable:
            chunk = (prefix + piece)[: size - sent] if sent == 0 else piece[: size - sent]
            data = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" if chunked else chunk
            try:
                sock.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
    else:
        if chunked:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(b"0\r\n\r\n")
    try:
        while b"\r\n\r\n" not in reply:
            data = sock.recv(65536)
            if not data:
                break
            reply += data
        head, _, rest = reply.partition(b"\r\n\r\n")
        match = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
        want = int(match.group(1)) if match else 0
        while len(rest) < want:
            data = sock.recv(65536)
            if not data:
                break
            rest += data
    except (ConnectionResetError, TimeoutError):
        head, rest = reply, b""
    finally:
        sock.close()
    status = re.match(rb"HTTP/1\.[01] (\d{3})", head)
    assert status is not None, f"no HTTP answer (sent {sent} bytes): {reply[:200]!r}"
    return Answer(int(status.group(1)), head.decode("latin-1"), rest, sent)


def unsubscribe_path(conn: Conn) -> str:
    """A valid one-click unsubscribe path for the first subscriber (campaign 1)."""
    row = conn.execute("SELECT id FROM subscribers ORDER BY id LIMIT 1").fetchone()
    assert row is not None
    key = link_key(conn, Settings())
    return "/unsubscribe/" + sign(key, UNSUBSCRIBE, int(row["id"]), 1)


def test_a_100_mb_unauthenticated_json_to_the_api_is_refused_before_it_is_read(
    serve: ServerFactory,
) -> None:
    server = serve(workers=False)
    for chunked in (False, True):
        with RssPeak(server.proc.pid) as memory:
            answer = post_raw(
                server, "/api/v1/campaigns", HUNDRED_MB, "application/json", chunked=chunked
            )
        assert answer.status in (401, 413), answer.head
        assert memory.growth < MAX_GROWTH, (chunked, memory.growth // MB)
        assert b'"error"' in answer.body


def test_a_100_mb_login_form_or_unsubscribe_post_is_refused_at_its_cap(
    conn: Conn, serve: ServerFactory
) -> None:
    seed_list(conn, "news", ["ada@example.org"])
    server = serve(workers=False)
    unsubscribe = unsubscribe_path(conn)
    form = "application/x-www-form-urlencoded"
    multipart = "multipart/form-data; boundary=xyz"
    part = b'--xyz\r\nContent-Disposition: form-data; name="password"\r\n\r\n'
    cases = [
        ("/login", form, b"email=a%40b.c&password=", False),
        ("/login", form, b"email=a%40b.c&password=", True),
        ("/login", multipart, part, False),
        (unsubscribe, form, b"List-Unsubscribe=One-Click&x=", False),
        (unsubscribe, form, b"List-Unsubscribe=One-Click&x=", True),
    ]
    for path, kind, prefix, chunked in cases:
        with RssPeak(server.proc.pid) as memory:
            answer = post_raw(server, path, HUNDRED_MB, kind, chunked=chunked, prefix=prefix)
        assert answer.status == 413, (path, kind, chunked, answer.head)
        assert memory.growth < MAX_GROWTH, (path, kind, chunked, memory.growth // MB)
        assert b"larger than 64 KiB" in answer.body
        assert answer.sent < HUNDRED_MB, answer.sent  # answered before the whole body
    # The refused body changed nothing; a normal one-click still works.
    row = conn.execute("SELECT count(*) AS n FROM suppressions").fetchone()
    assert row is not None and row["n"] == 0
    small = post_raw(server, unsubscribe, 26, form, prefix=b"List-Unsubscribe=One-Click")
    assert small.status == 200, small.head
    row = conn.execute("SELECT count(*) AS n FROM suppressions").fetchone()
    assert row is not None and row["n"] == 1


def test_an_authenticated_json_over_the_cap_gets_413(db_url: str, serve: ServerFactory) -> None:
    server = serve(workers=False)
    auth = {"Authorization": f"Bearer {make_token(db_url)}"}
    for chunked in (False, True):
        with RssPeak(server.proc.pid) as memory:
            answer = post_raw(
                server,
                "/api/v1/campaigns",
                9 * MB,
                "application/json",
                auth,
                chunked=chunked,
                prefix=b'{"name": "',
            )
        assert answer.status == 413, answer.head
        assert b"larger than 8 MB" in answer.body and b'"field":"body"' in answer.body
        assert memory.growth < 3 * 9 * MB
    with server.client(make_token(db_url)) as c:
        r = c.post("/api/v1/campaigns", json={"name": "x" * 300})
        assert r.status_code == 422, r.text  # under the cap: judged as usual


def _csv(rows: int) -> bytes:
    return ("email,name\n" + "".join(f"u{n}@example.org,User {n}\n" for n in range(rows))).encode()


def test_an_import_over_its_cap_gets_413_and_imports_nothing(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    server = serve(workers=False, env={"SENDDOCK_MAX_IMPORT_MB": "1"})
    token = make_token(db_url)
    big = _csv(60_000)  # ~1.7 MB
    assert len(big) > MB
    with server.client(token) as c:
        r = c.post(
            "/api/v1/imports",
            data={"list": "big"},
            files={"file": ("people.csv", big, "text/csv")},
        )
        assert r.status_code == 413, r.text
        assert r.json()["error"] == {"field": "file", "message": "the file is larger than 1 MB"}
        # Without a Content-Length: counted as it arrives.
        boundary = b"--b0\r\n"
        head = boundary + b'Content-Disposition: form-data; name="list"\r\n\r\nbig\r\n' + boundary
        head += b'Content-Disposition: form-data; name="file"; filename="p.csv"\r\n\r\n'
        answer = post_raw(
            server,
            "/api/v1/imports",
            len(head) + len(big),
            "multipart/form-data; boundary=b0",
            {"Authorization": f"Bearer {token}"},
            chunked=True,
            prefix=head + big,
        )
        assert answer.status == 413, answer.head
        time.sleep(1)
        assert c.get("/api/v1/lists").json() == []
    row = conn.execute("SELECT count(*) AS n FROM subscribers").fetchone()
    assert row is not None and row["n"] == 0
    row = conn.execute("SELECT count(*) AS n FROM import_jobs").fetchone()
    assert row is not None and row["n"] == 0

    # Under the cap, an import works as before.
    with server.client(token) as c:
        r = c.post(
            "/api/v1/imports",
            data={"list": "small"},
            files={"file": ("people.csv", _csv(1_000), "text/csv")},
        )
        assert r.status_code == 202, r.text
        job = r.json()["id"]
        assert wait_until(
            lambda: c.get(f"/api/v1/imports/{job}").json()["status"] == "done", timeout=30
        )
        assert c.get(f"/api/v1/imports/{job}").json()["imported"] == 1_000


def test_a_dashboard_import_over_its_cap_gets_a_413_page(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    make_admin(db_url, "admin@example.org", "correct horse battery staple")
    server = serve(workers=False, env={"SENDDOCK_MAX_IMPORT_MB": "1"})
    with server.client() as c:
        form = c.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        login = {"email": "admin@example.org", "password": "correct horse battery staple"}
        assert c.post("/login", data={**login, "csrf": csrf.group(1)}).status_code == 303
        page = c.get("/lists")
        token = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert token is not None
        r = c.post(
            "/lists/import",
            data={"csrf": token.group(1), "list_name": "big"},
            files={"file": ("people.csv", _csv(60_000), "text/csv")},
        )
        assert r.status_code == 413, r.text[:300]
        assert "the file is larger than 1 MB" in r.text and "<html" in r.text
    row = conn.execute("SELECT count(*) AS n FROM import_jobs").fetchone()
    assert row is not None and row["n"] == 0
