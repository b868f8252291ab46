"""A relay at a network distance: a TCP proxy on 127.0.0.1 that holds every segment the relay
sends for a round trip before passing it on.

    .venv/bin/python bench/relay_delay.py --to 2525 --rtt-ms 10      # prints its port

`bench/speed.py --rtt-ms N` and `bench/ab.py --rtt-ms N` run it (`running()`) in front of
smtp-sink for SendDock and the plain loop alike, in a process of its own, so its CPU counts as
neither's. Bytes keep their order (every segment
waits the same time); there is no loss and no bandwidth limit, and the kernel's own traffic
control (tc netem) is not needed. The whole round trip is added on the way back, not half each
way: uvloop's timers count whole milliseconds and truncate, so half of 1 ms was no delay at all
(a NOOP through it took 0.09 ms at `--rtt-ms 1`; now 1 ms takes about 1.1 ms, 4 ms 4.2 ms).
For a client that waits for replies, where the wait falls makes no difference.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Iterator
from typing import cast


class _Half(asyncio.Protocol):
    """One side of a proxied connection: what it receives reaches the other side `delay` later."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.transport: asyncio.Transport | None = None
        self.peer: _Half | None = None
        self._pending: list[bytes] = []  # data that arrived before the peer was connected

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self.delay > 0:
            asyncio.get_running_loop().call_later(self.delay, self._forward, data)
        else:
            self._forward(data)

    def _forward(self, data: bytes) -> None:
        peer = self.peer
        if peer is None or peer.transport is None:
            self._pending.append(data)
        elif not peer.transport.is_closing():
            peer.transport.write(data)

    def attach(self, peer: _Half) -> None:
        self.peer = peer
        for data in self._pending:
            self._forward(data)
        self._pending = []

    def connection_lost(self, exc: Exception | None) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            asyncio.get_running_loop().call_later(self.delay, peer.transport.close)


async def serve(port: int, target: int, rtt: float) -> None:
    """Proxy 127.0.0.1:`port` (0: any free port, printed) to 127.0.0.1:`target` until killed."""
    loop = asyncio.get_running_loop()

    async def accepted(client: _Half) -> None:
        try:
            _, upstream = await loop.create_connection(lambda: _Half(rtt), "127.0.0.1", target)
        except OSError:
            if client.transport is not None:
                client.transport.close()
            return
        if client.transport is None or client.transport.is_closing():
            if upstream.transport is not None:  # the client left while we connected
                upstream.transport.close()
            return
        client.attach(upstream)
        upstream.attach(client)

    connecting: set[asyncio.Task[None]] = set()  # kept until done (the loop holds tasks weakly)

    def factory() -> _Half:
        client = _Half(0.0)  # what the client sends goes on at once; the replies wait
        task = loop.create_task(accepted(client))
        connecting.add(task)
        task.add_done_callback(connecting.discard)
        return client

    server = await loop.create_server(factory, "127.0.0.1", port)
    bound = server.sockets[0].getsockname()[1]
    print(bound, flush=True)
    async with server:
        await server.serve_forever()


@contextlib.contextmanager
def running(target: int, rtt_ms: float) -> Iterator[int]:
    """This proxy in a process of its own, in front of 127.0.0.1:`target`; yields its port."""
    argv = [sys.executable, __file__, "--to", str(target), "--rtt-ms", str(rtt_ms)]
    proxy = subprocess.Popen(argv, stdout=subprocess.PIPE)
    try:
        assert proxy.stdout is not None
        yield int(proxy.stdout.readline())
    finally:
        proxy.terminate()
        proxy.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--to", type=int, required=True, help="the relay's port on 127.0.0.1")
    parser.add_argument("--rtt-ms", type=float, required=True, help="round trip added")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: any free)")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.run(serve(args.port, args.to, args.rtt_ms / 1000))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
