"""Long-running commands: `worker`, `serve`, `demo`.

Each imports what it runs inside its own body, so that `senddock worker` does not load the web
app, and `senddock serve` not the demo. `senddock worker` with more than one process replaces
itself with its supervisor (senddock/supervisor.py), which runs without click.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

import click

from senddock import startup
from senddock.cli.common import WEB, WORKER, current_database, epilog, failing, settings
from senddock.words import plural

# `senddock worker` without flags: one process per core (at most this many), each with
# DEFAULT_CONCURRENCY SMTP sessions. The cap keeps a big machine from opening more sessions to
# one relay than a small relay tolerates (Postfix allows 50 per client by default).
DEFAULT_CONCURRENCY = 5
MAX_AUTO_PROCESSES = 4


def default_processes(asked: int | None) -> int:
    """The worker processes to run: as asked; 0 is one per core; None is the default."""
    cores = len(os.sched_getaffinity(0))
    if asked is None:
        return min(cores, MAX_AUTO_PROCESSES)
    return asked or cores


DEMO_EPILOG = (
    "Settings (environment): SENDDOCK_DATABASE_URL and SENDDOCK_SMTP_URL, when set, are used"
    " instead of the demo's own embedded Postgres and SMTP catcher."
)


def _exit_after_shutdown(signum: int, frame: FrameType | None) -> None:
    """SIGTERM re-raised by uvicorn once its graceful shutdown is done: a clean exit."""
    raise SystemExit(0)


@click.command("worker", epilog=epilog(*WORKER))
@click.option(
    "--concurrency",
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    type=click.IntRange(1, 500),
    help="SMTP sessions (senders) per worker process.",
)
@click.option(
    "--processes",
    type=click.IntRange(0, 256),
    help=f"Worker processes, each with --concurrency SMTP sessions (0: one per core)."
    f"  [default: one per core, at most {MAX_AUTO_PROCESSES}]",
)
@click.pass_context
def worker_cmd(ctx: click.Context, concurrency: int, processes: int | None) -> None:
    """Send queued messages until SIGTERM or SIGINT (both finish what is in flight)."""
    processes = default_processes(processes)
    if processes == 1:
        with failing():
            s = startup.check_worker(concurrency, processes)
        from senddock.db import database_url
        from senddock.runtime import run_worker

        sys.exit(run_worker(s, database_url(s), concurrency))
    # More than one: this process becomes the supervisor, a new program that imports the
    # standard library alone (not click, nor this module), so that it and every worker forked
    # from it carry none of the command line (senddock/supervisor.py).
    from senddock import supervisor

    verbose = bool(ctx.find_root().params.get("verbose"))
    argv = supervisor.command(processes, concurrency, verbose=verbose)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)


@click.command("demo", epilog=DEMO_EPILOG)
@click.option(
    "--subscribers",
    "count",
    default=3000,
    show_default=True,
    type=click.IntRange(10),
    help="How many made-up subscribers to send to.",
)
def demo_cmd(count: int) -> None:
    """Run a whole broadcast on an embedded Postgres and SMTP catcher, with a crash in it."""
    from senddock.demo import run_demo

    sys.exit(run_demo(count))


@click.command("serve", epilog=epilog(*WORKER, *WEB))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    default=8025,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="Port to listen on.",
)
@click.option(
    "--schedule-every",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Seconds between scheduler passes (0: run no scheduler here).",
)
@click.option("--no-workers", is_flag=True, help="Send nothing here; run `senddock worker`s.")
@click.option(
    "--concurrency",
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    type=click.IntRange(1, 500),
    help="SMTP sessions (senders) of the worker run here.",
)
def serve_cmd(
    host: str, port: int, schedule_every: float, no_workers: bool, concurrency: int
) -> None:
    """Serve the API (/api/v1), the dashboard and the unsubscribe pages every message links to
    (at SENDDOCK_PUBLIC_URL); run the scheduler and, unless --no-workers, a worker."""
    import uvicorn

    from senddock.web import create_app

    s = settings()
    url = current_database(s)
    senders = (
        "none here (--no-workers): run `senddock worker`"
        if no_workers
        else f"{plural(concurrency, 'SMTP session')} in this process"
    )
    click.echo(startup.startup_block("serve", s, senders), err=True)
    click.echo(f"  listening   http://{host}:{port}", err=True)
    proxies = ", ".join(s.proxies) or "none (X-Forwarded-For is ignored)"
    click.echo(f"  proxies     {proxies}", err=True)
    app = create_app(
        url,
        schedule_every=schedule_every,
        settings=s,
        workers=0 if no_workers else concurrency,
    )
    # uvicorn handles SIGTERM/SIGINT: the app's shutdown stops the worker, which finishes
    # the messages in flight before the process exits. Then it restores our handlers and
    # raises the signal again: SIGTERM must end in an exit that runs the embedded Postgres's
    # cleanup (atexit), where its default action would kill us and leave the server running.
    signal.signal(signal.SIGTERM, _exit_after_shutdown)
    # X-Forwarded-For names the client only when it comes from a trusted proxy: uvicorn's
    # default trusts 127.0.0.1, so behind a proxy that passes the client's own header along,
    # every request could claim a new address (and dodge the sign-in limits).
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=30,
        proxy_headers=bool(s.proxies),
        forwarded_allow_ips=s.proxies,
    )
