"""Helpers for the HTTP tests: a real `senddock serve` process, API tokens and admins."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import forkserver
from support import senddock, worker_env


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """`n` distinct free ports: each held until all are chosen (one after another, free_port
    may hand the same port back twice, and a server given it twice refuses to start)."""
    held = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for s in held:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in held]
    finally:
        for s in held:
            s.close()


class Server:
    """One `senddock serve` subprocess; its output goes to `log`."""

    def __init__(self, proc: forkserver.Forked, url: str, log: Path) -> None:
        self.proc = proc
        self.url = url
        self.log = log

    def text(self) -> str:
        """What the server wrote to stdout and stderr so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def client(self, token: str | None = None, **kwargs: object) -> httpx.Client:
        """An httpx client for this server, with a Bearer token when given."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, **kwargs)  # type: ignore[arg-type]

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (in-flight messages finish) and wait; kill if it hangs. The exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait(10)
        return self.proc.wait()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def start_server(
    db_url: str,
    smtp_url: str,
    *,
    workers: bool = True,
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
    timeout: float = 60.0,
    port: int | None = None,
) -> Server:
    """Start `senddock serve --port <free, or port>` and wait until /healthz answers."""
    port = port or free_port()
    full_env = worker_env(db_url, smtp_url, **(env or {}))
    log = Path(tempfile.mkstemp(prefix="senddock-serve-", suffix=".log")[1])
    cmd = ["-v", "serve", "--port", str(port), *args]
    if not workers:
        cmd.append("--no-workers")
    proc = forkserver.popen(cmd, full_env, log)
    server = Server(proc, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"senddock serve exited with {proc.returncode}:\n{server.text()}")
        try:
            if httpx.get(server.url + "/healthz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"senddock serve did not answer /healthz in {timeout}s:\n{server.text()}")


def make_token(db_url: str, name: str = "test") -> str:
    """A new API token made by `senddock token create`."""
    done = senddock(worker_env(db_url, "smtp://127.0.0.1:1"), "token", "create", "--name", name)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def make_admin(db_url: str, email: str, password: str) -> None:
    """A dashboard admin made by `senddock admin create` (password on stdin)."""
    env = worker_env(db_url, "smtp://127.0.0.1:1")
    done = forkserver.run(["admin", "create", "--email", email], env, input=password + "\n")
    assert done.returncode == 0, done.stderr


ServerFactory = Callable[..., Server]


def servers(db_url: str) -> Iterator[ServerFactory]:
    """The body of a fixture: yields `start(smtp_url, workers=..., env=...)`; every server it
    started stops at teardown, and their output is printed (shown when a test failed)."""
    started: list[Server] = []

    def start(smtp_url: str = "smtp://127.0.0.1:1", **kwargs: Any) -> Server:
        server = start_server(db_url, smtp_url, **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
        sys.stdout.write(f"===== senddock serve {server.url}\n{server.text()}\n")
        server.log.unlink(missing_ok=True)


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    """Start servers with `serve(smtp_url, workers=..., env=...)`; all stop at teardown.

    Use it from a test module with `from web_support import serve  # noqa: F401`, or define
    a fixture of your own that does `yield from servers(db_url)`.
    """
    yield from servers(db_url)
