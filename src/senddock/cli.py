"""The `senddock` command. Every failure a person can cause ends in one line and a non-zero exit."""

from __future__ import annotations

import email
import email.message
import email.policy
import functools
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

import click
import psycopg
from pydantic import ValidationError

from senddock import audience, campaigns, config
from senddock import layout_cli as layout_commands
from senddock.audience import addresses, consent, erasure, optin, signup, suppressions
from senddock.audience import lists as lists_api
from senddock.audience import subscribers as subscribers_api
from senddock.audience.export import export_subscribers
from senddock.bounces import store as bounce_store
from senddock.bounces.classify import KIND as BOUNCE_REASONS
from senddock.bounces.verp import ReturnPath
from senddock.campaigns import compose
from senddock.campaigns.recipients import write_csv as write_recipients_csv
from senddock.config import Settings, SmtpTarget, load
from senddock.db import check_current, connect, database_url, migrate
from senddock.db.connect import default_data_dir
from senddock.errors import SendDockError
from senddock.queue import bounces as effects
from senddock.queue.counts import COMPLAINT_LIMIT, bounced_at_send
from senddock.words import plural

log = logging.getLogger("senddock")


class Fail(click.ClickException):
    """A one-line error about the command line itself (what the services below refuse is a
    SendDockError, raised where it happens: main() prints both the same way)."""

    def format_message(self) -> str:
        return " ".join(self.message.split())


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


@functools.cache
def settings() -> Settings:
    """The settings of this command, read from the environment once and checked; every part
    of the command is handed this one object."""
    try:
        s = load()
        SmtpTarget.parse(s.smtp_url)
        s.backoff  # noqa: B018  (parse the schedule now, not mid-broadcast)
        s.proxies  # noqa: B018
        if s.bounce_domain:
            ReturnPath.parse(s.bounce_domain)
    except (ValidationError, ValueError) as exc:
        raise Fail(f"bad configuration: {exc}") from exc
    addresses.configure(s.allow_reserved_domains)
    return s


@contextmanager
def db(require_schema: bool = True) -> Iterator[psycopg.Connection[dict[str, Any]]]:
    """A connection to the configured database, with errors turned into one line."""
    s = settings()
    try:
        url = database_url(s)
        conn = connect(url)
    except psycopg.OperationalError as exc:
        raise Fail(f"cannot reach the database: {_first_line(exc)}") from exc
    except psycopg.ProgrammingError as exc:  # connect() took its password out
        raise Fail(f"bad SENDDOCK_DATABASE_URL: {_first_line(exc)}") from exc
    except Exception as exc:  # the embedded server failed to start
        raise Fail(f"cannot start the embedded database: {_first_line(exc)}") from exc
    try:
        if require_schema:
            check_current(conn)
        yield conn
    except psycopg.OperationalError as exc:
        raise Fail(f"database error: {_first_line(exc)}") from exc
    finally:
        conn.close()


def current_database(s: Settings) -> str:
    """The database URL, once the database is reachable and its schema current; else Fail."""
    try:
        url = database_url(s)
        with connect(url) as conn:
            check_current(conn)
    except psycopg.OperationalError as exc:
        raise Fail(f"cannot reach the database: {_first_line(exc)}") from exc
    except psycopg.ProgrammingError as exc:  # connect() took its password out
        raise Fail(f"bad SENDDOCK_DATABASE_URL: {_first_line(exc)}") from exc
    except SendDockError:  # the schema is not current: main() says so
        raise
    except Exception as exc:  # the embedded server failed to start
        raise Fail(f"cannot start the embedded database: {_first_line(exc)}") from exc
    return url


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _read(path: str | None, what: str) -> str | None:
    if path is None:
        return None
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise Fail(f"cannot read {what} {path}: {exc}") from exc


def epilog(*names: str) -> str:
    """The --help epilog naming the settings a command reads."""
    return "Settings (environment): " + ", ".join(f"SENDDOCK_{n}" for n in names) + "."


# The settings each command reads (its --help lists them). See config.py.
DB = ("DATABASE_URL", "DATA_DIR")
SENDING = ("SMTP_URL", "SMTP_TIMEOUT", "RETRY_SCHEDULE")
LINKS = ("PUBLIC_URL", "SECRET_KEY", "UNSUBSCRIBE_MAILTO")
WORKER = (
    *DB,
    *SENDING,
    *LINKS,
    "HEARTBEAT_INTERVAL",
    "LEASE_SECONDS",
    "SENDER_FAULT_LIMIT",
    "JOB_SENDER_FAULT_LIMIT",
    "CLAIM_BATCH",
    "RETENTION_DAYS",
    "ENQUEUE_CHUNK",
)
WEB = (
    "SESSION_SECRET",
    "COOKIE_SECURE",
    "SESSION_IDLE_TIMEOUT",
    "SESSION_LIFETIME",
    "TRUSTED_PROXIES",
    "ONE_CLICK",
)
DEMO_EPILOG = (
    "Settings (environment): SENDDOCK_DATABASE_URL and SENDDOCK_SMTP_URL, when set, are used"
    " instead of the demo's own embedded Postgres and SMTP catcher."
)


def startup_block(command: str, s: Settings, senders: str) -> str:
    """What a long-running command is about to use, for stderr: relays, limits, senders,
    database and public URL, with a warning for each setting left at a default that only
    suits a test machine. Passwords are never shown."""
    rows = config.describe(s)
    if not s.database_url:
        rows[-1] = ("database", f"embedded Postgres in {default_data_dir(s) / 'pgdata'}")
    rows += [("senders", senders), ("public URL", s.public_url)]
    lines = [f"senddock {command}: starting"]
    lines += [f"  {label:<12}{text}" for label, text in rows]
    if config.defaulted(s, "smtp_url"):
        lines.append(
            f"  warning: SENDDOCK_SMTP_URL is not set; sending to the default {s.smtp_url}"
        )
    if config.defaulted(s, "public_url"):
        lines.append(
            "  warning: SENDDOCK_PUBLIC_URL is not set; unsubscribe links in messages point to"
            f" {s.public_url}, which subscribers cannot reach"
        )
    return "\n".join(lines)


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM during a command: exit as a signal would, but through Python's exit, so the
    embedded Postgres's cleanup (atexit) still stops it and forgets this process."""
    raise SystemExit(128 + signum)


def _exit_after_shutdown(signum: int, frame: FrameType | None) -> None:
    """SIGTERM re-raised by uvicorn once its graceful shutdown is done: a clean exit."""
    raise SystemExit(0)


# The settings whose values may carry a password: never printed, in a log line or an error.
SECRET_URLS = ("SENDDOCK_DATABASE_URL", "SENDDOCK_SMTP_URL")


def _secret(text: str) -> str:
    """`text` with the passwords of the configured URLs (and of any URL in it) hidden."""
    return config.redact(text, *(os.environ.get(name, "") for name in SECRET_URLS))


class _Redacting(logging.Formatter):
    """Log lines, tracebacks included, with every password replaced by ***."""

    def format(self, record: logging.LogRecord) -> str:
        return _secret(super().format(record))


def _setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Redacting("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])
    if verbose:  # our own details, tracebacks included (they are logged at DEBUG)
        logging.getLogger("senddock").setLevel(logging.DEBUG)


@click.group()
@click.version_option(package_name="senddock", prog_name="senddock")
@click.option("-v", "--verbose", is_flag=True, help="Log what SendDock does, with tracebacks.")
def cli(verbose: bool) -> None:
    """SendDock: email broadcasts that survive the process dying at any moment."""
    _setup_logging(verbose)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)


@cli.command("migrate", epilog=epilog(*DB))
def migrate_cmd() -> None:
    """Create or update the database schema (idempotent; safe while workers run)."""
    with db(require_schema=False) as conn:
        done = migrate(conn)
    click.echo(f"applied {', '.join(done)}" if done else "schema is current")


@cli.group()
def subscribers() -> None:
    """Subscribers and lists."""


@subscribers.command("import", epilog=epilog(*DB))
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--list", "list_name", required=True, help="List to add them to (created if new).")
def import_cmd(file: Path, list_name: str) -> None:
    """Import a CSV with a header row: email, optional name, attributes (JSON), other columns.

    Other columns become attributes. Re-importing updates; suppressed addresses stay suppressed.
    listmonk's subscriber export is recognised: its blocklisted rows are suppressed.
    """

    # The first rejection is held back: when it is the file's only row, the error below is
    # one line that says why; from the second on, each is printed as it is found.
    held: list[tuple[int, str]] = []

    def say(line: int, reason: str) -> None:
        click.echo(f"{file}:{line}: rejected: {reason}", err=True)

    def rejected(line: int, reason: str) -> None:
        held.append((line, reason))
        if len(held) == 2:
            say(*held[0])
        if len(held) >= 2:
            say(line, reason)

    with db() as conn:
        report = audience.import_csv(conn, file, list_name, on_reject=rejected)
    if len(held) == 1 and not report.imported:
        line, reason = held[0]
        raise Fail(
            f"imported nothing from {file}: the only row was rejected (line {line}: {reason})"
        )
    if len(held) == 1:
        say(*held[0])
    if report.rejected_count and not report.imported:
        raise Fail(f"imported nothing from {file}: all {report.rejected_count} rows were rejected")
    merged = f", {plural(report.merged, 'duplicate row')} merged" if report.merged else ""
    blocked = report.blocklisted
    suppressed = f", {blocked} blocklisted in listmonk and suppressed" if blocked else ""
    click.echo(
        f"imported {plural(report.imported, 'row')} into {list_name!r}:"
        f" {plural(report.addresses, 'subscriber')} ({report.created} new){merged}{suppressed};"
        f" rejected {plural(report.rejected_count, 'row')}; {_lines_read(report)}"
    )


def _lines_read(report: audience.ImportReport) -> str:
    """Every line of the file accounted for: `N lines: 1 header + imported + rejected …`."""
    lines = report.lines
    parts = ["1 header", f"{report.imported} imported", f"{report.rejected_count} rejected"]
    if lines.blank:
        parts.append(f"{lines.blank} blank")
    if lines.inside:
        parts.append(f"{lines.inside} inside quoted fields")
    return f"{plural(lines.read, 'line')}: {' + '.join(parts)}"


@cli.group()
def campaign() -> None:
    """Create, send and watch campaigns."""


@campaign.command("create")
@click.option("--name", required=True, help="What the campaign is called (never sent).")
@click.option(
    "--list", "list_name", required=True, multiple=True, help="A list to send to (repeatable)."
)
@click.option("--subject", required=True, help="The Subject: header.")
@click.option("--from", "from_addr", required=True, help='e.g. "Ada <news@example.org>"')
@click.option("--text-file", type=click.Path(), help="Text body (derived from the HTML if unset).")
@click.option("--html-file", type=click.Path(), help="HTML body.")
@click.option("--markdown-file", type=click.Path(), help="Markdown body (instead of HTML).")
@click.option("--layout", help='Layout name (default: the default layout; "none": no layout).')
@click.option("--reply-to", help='Reply-To address, e.g. "Ada <ada@example.org>".')
@click.option("--send-at", help="ISO 8601 time to send at (local time if no zone).")
@click.option("--segment", help="A saved segment narrowing the lists (senddock segment add).")
@click.option("--filter", "audience_filter", help='Its own filter, e.g. attributes.city = "Oslo".')
def create_cmd(
    name: str,
    list_name: tuple[str, ...],
    subject: str,
    from_addr: str,
    text_file: str | None,
    html_file: str | None,
    markdown_file: str | None,
    layout: str | None,
    reply_to: str | None,
    send_at: str | None,
    segment: str | None,
    audience_filter: str | None,
) -> None:
    """Create a draft campaign; prints its id alone."""
    if text_file is None and html_file is None and markdown_file is None:
        raise click.UsageError("give --text-file, --html-file or --markdown-file")
    text = _read(text_file, "text file")
    html = _read(html_file, "html file")
    markdown = _read(markdown_file, "markdown file")
    when = _send_at(send_at)
    with db() as conn:
        campaigns.refuse_past(conn, when)
        cid = campaigns.create_campaign(
            conn,
            name=name,
            list_name=list_name,
            subject=subject,
            from_addr=from_addr,
            text_body=text,
            html_body=html,
            reply_to=reply_to,
            send_at=when,
            segment=segment,
            audience_filter=audience_filter,
            layout=layout,
            markdown_body=markdown,
        )
    click.echo(cid)


cli.add_command(layout_commands.layout)


@campaign.command("send", epilog=epilog(*DB))
@click.argument("campaign_id", type=int)
def send_cmd(campaign_id: int) -> None:
    """Start the broadcast and return at once; workers enqueue the rest and send it."""
    from senddock.campaigns.workers import send_warning

    lease = settings().lease_seconds
    with db() as conn:
        bid, total, created = campaigns.broadcast(conn, campaign_id)
        st = campaigns.status(conn, campaign_id)
        warning = send_warning(conn, lease) if st["status"] == "sending" else None
    if created:
        click.echo(
            f"campaign {campaign_id}: broadcast {bid} started"
            f" ({plural(total, 'recipient')} enqueued so far; workers enqueue the rest;"
            " see `campaign status`)"
        )
    else:
        click.echo(
            f"campaign {campaign_id}: already {st['status']} as broadcast {bid}"
            f" ({plural(total, 'recipient')})"
        )
    if warning:
        click.echo(f"senddock: warning: {warning}", err=True)


@campaign.command("status")
@click.argument("campaign_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option("--watch", is_flag=True, help="Refresh every second until it is sent or cancelled.")
def status_cmd(campaign_id: int, as_json: bool, watch: bool) -> None:
    """Exact counts, read from the queue."""
    if watch and as_json:
        raise click.UsageError("--watch and --json do not go together")
    lease = settings().lease_seconds
    with db() as conn:
        st = campaigns.status(conn, campaign_id, lease)
        if watch:
            st = _watch(conn, campaign_id, st)
    if as_json:
        click.echo(json.dumps(st, default=_iso))
        return
    if not watch:
        click.echo("\n".join(_status_lines(st)))


def _iso(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _settled(st: dict[str, Any]) -> bool:
    """Nothing will change without a person: sent or cancelled with nothing in flight, or an
    unscheduled draft."""
    if st["status"] == "draft":
        return st["send_at"] is None
    return st["status"] in ("sent", "cancelled") and not st["sending"]


def _status_lines(st: dict[str, Any]) -> list[str]:
    """`campaign status` as text: a headline, the counts, then why it waits or stopped."""
    head = f"campaign {st['id']} {st['name']!r}: {st['state']}"
    if st["status"] == "cancelled" and st["broadcast_id"] is not None:
        head += (
            f" ({st['sent']} sent, {st['cancelled']} cancelled, {st['failed']} failed"
            f" of {plural(st['total'], 'recipient')}"
        )
        if st["sending"]:
            head += f"; {st['sending']} in flight: their outcome still lands"
        head += ")"
    elif st["status"] == "draft" and st["send_at"] is not None:
        head += f", scheduled for {_iso(st['send_at'])}"
    lines = [
        head,
        "  total {total}  pending {pending}  sending {sending}  retry {retry}  sent {sent}"
        "  failed {failed} (bounced {bounced}, suppressed {suppressed}, exhausted {exhausted},"
        " rejected {rejected})  cancelled {cancelled}  unconfirmed {unconfirmed}".format(**st),
    ]
    if st["no_live_worker"]:
        lines.append(
            "  no live worker: nothing is being sent; start `senddock worker` (jobs a dead"
            " worker held are rescued once one runs)"
        )
    if st["unconfirmed"]:
        lines.append(
            f"  {st['unconfirmed']} unconfirmed: the final dot went and no outcome was recorded;"
            f" `senddock campaign reconcile {st['id']}` asks the relay's log and the providers;"
            f" else check the relay's log, then `senddock campaign confirm {st['id']}` (they"
            f" went) or `senddock campaign resend-unconfirmed {st['id']}` (send them again);"
            " --job ID for only some"
        )
        for u in st["unconfirmed_jobs"]:
            at = _iso(u["dot_at"]) if u["dot_at"] else "?"
            lines.append(
                f"    job {u['id']}  {u['email']}  dot at {at} to {u['relay'] or '?'} by worker"
                f" {u['worker_id']}  {u['message_id']}"
            )
            for w in u["said"]:  # issue 41: what each source said at the last reconcile
                lines.append(f"      {w['source']}: {w['said']} ({w['detail']})")
    if st["broadcast_id"] is not None:
        lines.append(
            f"  later: {st['bounced_later']} bounced, {st['soft_later']} soft,"
            f" {st['policy_later']} policy, {plural(st['complaints'], 'complaint')}"
            f" (rate {st['complaint_rate'] * 100:.2f} %,"
            f" Gmail's limit {COMPLAINT_LIMIT * 100:.1f} %)"
        )
    if not st["enqueue_done"]:
        lines.append(f"  still enqueuing: {plural(st['total'], 'recipient')} so far")
    if st["pause_reason"]:
        lines.append(f"  paused because the relay said: {st['pause_reason']}")
    elif st["last_sender_fault"]:
        lines.append(f"  last reply about us: {st['last_sender_fault']}")
    if st["schedule_error"]:
        lines.append(f"  not sent at its scheduled time: {st['schedule_error']}")
    if st["last_problem"]:
        lines.append(f"  last problem: {st['last_problem']}")
    if st["worker_deaths"]:
        n = st["worker_deaths"]
        lines.append(
            f"  {n} worker process{'es' if n != 1 else ''} died holding its messages;"
            f" the last: {st['last_worker_death']}"
        )
    return lines


def _watch(
    conn: psycopg.Connection[dict[str, Any]], campaign_id: int, st: dict[str, Any]
) -> dict[str, Any]:
    """Show the status, refreshed every second, until the campaign settles or Ctrl-C."""
    import time

    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    def view(s: dict[str, Any]) -> Text:
        return Text("\n".join(_status_lines(s)))

    console = Console(highlight=False)
    try:
        with Live(view(st), console=console, auto_refresh=False) as live:
            while not _settled(st):
                time.sleep(1.0)
                st = campaigns.status(conn, campaign_id, settings().lease_seconds)
                live.update(view(st), refresh=True)
    except KeyboardInterrupt:
        pass
    return st


@campaign.command("pause")
@click.argument("campaign_id", type=int)
def pause_cmd(campaign_id: int) -> None:
    """Stop new sends now; messages in flight finish."""
    with db() as conn:
        campaigns.pause(conn, campaign_id)
    click.echo(f"campaign {campaign_id} paused")


@campaign.command("resume")
@click.argument("campaign_id", type=int)
def resume_cmd(campaign_id: int) -> None:
    """Continue a paused campaign."""
    with db() as conn:
        campaigns.resume(conn, campaign_id)
    click.echo(f"campaign {campaign_id} resumed")


@campaign.command("cancel")
@click.argument("campaign_id", type=int)
def cancel_cmd(campaign_id: int) -> None:
    """Cancel every message not yet sent; messages in flight finish."""
    with db() as conn:
        done = campaigns.cancel_and_settle(conn, campaign_id)
    click.echo(
        f"campaign {campaign_id} cancelled: {plural(done.cancelled, 'message')}"
        f" will not be sent; {done.in_flight} in flight when cancelled"
        f" (their outcome still lands); {done.sent} sent"
    )


@cli.command("workers", epilog=epilog(*DB))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def workers_cmd(as_json: bool) -> None:
    """Registered workers: health, last heartbeat (database clock) and the jobs each holds."""
    from senddock.delivery.rescuer import list_workers

    lease = settings().lease_seconds
    with db() as conn:
        rows = list_workers(conn, lease)
    if as_json:
        click.echo(json.dumps(rows, default=str))
        return
    if not rows:
        click.echo("no workers registered")
    for w in rows:
        click.echo(
            f"worker {w['id']}  {w['health']}  {w['host']} pid {w['pid']}"
            f"  senders {w['concurrency']}  heartbeat {w['heartbeat_age']:.1f}s ago"
            f"  holding {plural(w['holding'], 'job')}"
            + (
                f"  (silent past the {lease:g} s lease: a live worker rescues its jobs)"
                if w["health"] == "dead"
                else ""
            )
        )


@cli.command("worker", epilog=epilog(*WORKER))
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
def worker_cmd(concurrency: int, processes: int | None) -> None:
    """Send queued messages until SIGTERM or SIGINT (both finish what is in flight)."""
    from senddock.delivery.processes import run_processes
    from senddock.runtime import run_worker

    s = settings()
    url = current_database(s)
    processes = default_processes(processes)
    each = plural(concurrency, "SMTP session")
    senders = f"{each} in each of {plural(processes, 'process', 'processes')}"
    click.echo(startup_block("worker", s, senders), err=True)
    if processes > 1:
        work = functools.partial(run_worker, s, url, concurrency)
        note = functools.partial(_note_exit, url)
        sys.exit(run_processes(processes, work, watchdog=s.lease_seconds, note=note))
    sys.exit(run_worker(s, url, concurrency))


def _note_exit(url: str, pid: int, started: str, reason: str) -> None:
    """Write down how a worker process ended, for its death record (delivery/rescuer.py)."""
    from senddock.delivery.rescuer import Identity, note_exit

    ident = Identity(socket.gethostname(), "", pid, started)
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        note_exit(conn, ident, reason)


@cli.command("demo", epilog=DEMO_EPILOG)
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


# -- audience, compliant messages, who got what (issue 4) ------------------------------------


@campaign.command("preview")
@click.argument("campaign_id", type=int)
@click.option("--to", "address", help="Render as this subscriber would get it.")
@click.option("--raw", is_flag=True, help="Print the message bytes exactly as sent.")
def preview_cmd(campaign_id: int, address: str | None, raw: bool) -> None:
    """Print the message a subscriber would get: headers, then each body; without --to, how
    many would receive it if it were sent now (its lists narrowed by its segment)."""
    if address is None:
        _preview_count(campaign_id)
        return
    with db() as conn:
        data = compose.preview(conn, campaign_id, address, settings())
    if raw:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    msg = email.message_from_bytes(data, policy=email.policy.default)
    for key, value in msg.items():
        click.echo(f"{key}: {value}")
    for part in msg.walk():
        if part.get_content_maintype() == "text":
            assert isinstance(part, email.message.EmailMessage)
            click.echo(f"\n--- {part.get_content_type()} ---")
            click.echo(str(part.get_content()).rstrip("\n"))


@campaign.command("recipients")
@click.argument("campaign_id", type=int)
@click.option(
    "--status", help="Only this job status (sent, failed, …) or failure (bounced, exhausted, …)."
)
@click.option("--csv", "as_csv", is_flag=True, help="CSV with a header row, every column.")
def recipients_cmd(campaign_id: int, status: str | None, as_csv: bool) -> None:
    """Every recipient: status, attempts, sent time, Message-ID and the last SMTP reply."""
    with db() as conn:
        if as_csv:
            write_recipients_csv(conn, campaign_id, status, sys.stdout)
            return
        for r in campaigns.recipients(conn, campaign_id, status):
            state = r["status"] + (f"/{r['failure']}" if r["failure"] else "")
            sent = r["sent_at"].strftime("%Y-%m-%d %H:%M:%S") if r["sent_at"] else "-"
            reply = campaigns.reply_summary(r)
            settled = ""
            if r["settled_by"]:  # issue 41: who settled it once unconfirmed, and when
                settled = f"  settled by {r['settled_by']} at {_iso(r['settled_at'])}"
            click.echo(
                f"{r['email']}  {state}  attempts {r['attempts']}  sent {sent}"
                f"  {r['message_id']}" + (f"  last reply: {reply}" if reply else "") + settled
            )


@campaign.command("retry-failed")
@click.argument("campaign_id", type=int)
def retry_failed_cmd(campaign_id: int) -> None:
    """Re-queue the failed recipients of a campaign whose address is not suppressed."""
    with db() as conn:
        n = campaigns.retry_failed(conn, campaign_id)
        st = campaigns.status(conn, campaign_id)
    paused = " (the campaign is paused: resume it to send them)" if st["status"] == "paused" else ""
    click.echo(f"campaign {campaign_id}: {n} failed recipients queued again{paused}")


JOBS = click.option(
    "--job",
    "jobs",
    type=int,
    multiple=True,
    help="Only this job (repeatable; ids from `campaign status`). Default: every unconfirmed one.",
)


@campaign.command("resend-unconfirmed")
@click.argument("campaign_id", type=int)
@JOBS
def resend_unconfirmed_cmd(campaign_id: int, jobs: tuple[int, ...]) -> None:
    """Send again the unconfirmed recipients (final dot sent, no outcome recorded), with the
    same Message-ID: a duplicate for those the relay had accepted."""
    with db() as conn:
        n = campaigns.resend_unconfirmed(conn, campaign_id, jobs or None)
    click.echo(f"campaign {campaign_id}: {n} unconfirmed recipients queued again")


@campaign.command("confirm")
@click.argument("campaign_id", type=int)
@JOBS
def confirm_cmd(campaign_id: int, jobs: tuple[int, ...]) -> None:
    """Mark the unconfirmed recipients sent, once the relay's log shows they went."""
    with db() as conn:
        n = campaigns.confirm(conn, campaign_id, jobs or None)
    click.echo(f"campaign {campaign_id}: {n} unconfirmed recipients confirmed sent")


# --- campaign reconcile (issue 41): one block, its logic in campaigns/reconcile.py ---


@campaign.command("reconcile")
@click.argument("campaign_id", type=int)
@click.option(
    "--log",
    "logs",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="The relay's log file (Postfix or Exim; repeatable: give the rotated ones too)."
    " Default: SENDDOCK_RECONCILE_LOGS.",
)
@click.option("--dry-run", is_flag=True, help="Say what each source says; change nothing.")
def reconcile_cmd(campaign_id: int, logs: tuple[str, ...], dry_run: bool) -> None:
    """Ask the relay's log and the providers' searches what became of the unconfirmed
    recipients: confirm those the relay accepted, send again those it provably never took,
    and leave the rest (with what each source said) for a person."""
    from senddock.campaigns import reconcile as rec

    with db() as conn:
        sources = rec.sources_from(settings(), logs, rec.sender_of(conn, campaign_id))
        done = rec.reconcile(conn, campaign_id, sources, apply=not dry_run)
    for v in done.verdicts:
        said = "; ".join(f"{w.source}: {w.said} ({w.detail})" for w in v.words)
        what = {"confirmed": "confirmed sent", "resent": "queued again", "held": "left"}
        verb = what[v.outcome] if not dry_run else f"would be {what[v.outcome]}"
        click.echo(f"  job {v.job.id}  {v.job.email}  {verb}  {said}")
    head = "would confirm" if dry_run else "confirmed"
    click.echo(
        f"campaign {campaign_id}: {head} {done.count('confirmed')} sent,"
        f" {'would queue' if dry_run else 'queued'} {done.count('resent')} again,"
        f" {done.count('held')} left for a person (no source could tell)"
    )


@subscribers.command("export", epilog=epilog(*DB))
@click.option("--list", "list_name", help="Only this list's members (default: everyone).")
@click.option("--segment", "segment_name", help="Only those a saved segment matches.")
@click.option("--filter", "filter_text", help="Only those a segment filter matches.")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the CSV to this file (default: stdout).",
)
def export_cmd(
    list_name: str | None, segment_name: str | None, filter_text: str | None, output: Path | None
) -> None:
    """Write subscribers as CSV: email,name,status,attributes,suppressed (spreadsheet-safe
    cells; it imports back as it is). Everyone, or a list's members, narrowed by a segment."""
    from senddock.audience import segments

    if segment_name is not None and filter_text is not None:
        raise Fail("give --segment or --filter, not both")
    with db() as conn:
        if segment_name is not None:
            filter_text = segments.find(conn, segment_name).filter
        if output is None:
            n = export_subscribers(conn, sys.stdout, list_name, filter_text)
        else:
            with output.open("w", newline="", encoding="utf-8") as handle:
                n = export_subscribers(conn, handle, list_name, filter_text)
    if output is not None:
        whom = plural(n, "member" if list_name is not None else "subscriber")
        click.echo(f"exported {whom}{f' of {list_name!r}' if list_name else ''} to {output}")


@cli.group("suppressions")
def suppressions_group() -> None:
    """Addresses no broadcast sends to: bounced, unsubscribed, complained, or added by hand."""


@suppressions_group.command("list", epilog=epilog(*DB))
@click.option("--reason", type=click.Choice(suppressions.REASONS), help="Only this reason.")
def suppressions_list_cmd(reason: str | None) -> None:
    """Every suppressed address with its reason and date."""
    with db() as conn:
        for r in suppressions.rows(conn, reason):
            when = r["created_at"].strftime("%Y-%m-%d %H:%M")
            why = f"{r['reason']} ({r['bounce_reason']})" if r["bounce_reason"] else r["reason"]
            click.echo(f"{r['email']}  {why}  {when}  {r['detail']}".rstrip())


@suppressions_group.command("add", epilog=epilog(*DB))
@click.argument("addresses", nargs=-1, required=True)
@click.option(
    "--reason",
    default="manual",
    show_default=True,
    type=click.Choice(suppressions.REASONS),
    help="Why they are suppressed.",
)
def suppressions_add_cmd(addresses: tuple[str, ...], reason: str) -> None:
    """Suppress addresses: no broadcast sends to them, including ones already enqueued."""
    with db() as conn:
        for a in addresses:
            added = suppressions.add(conn, a, reason)
            click.echo(f"{a}: {'suppressed' if added else 'already suppressed'}")


@suppressions_group.command("remove", epilog=epilog(*DB))
@click.argument("addresses", nargs=-1, required=True)
def suppressions_remove_cmd(addresses: tuple[str, ...]) -> None:
    """Make addresses sendable again (a bounced subscriber becomes active)."""
    with db() as conn:
        for a in addresses:
            gone = suppressions.remove(conn, a)
            click.echo(f"{a}: {'removed' if gone else 'was not suppressed'}")


@suppressions_group.command("import", epilog=epilog(*DB))
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--reason",
    default="manual",
    show_default=True,
    type=click.Choice(suppressions.REASONS),
    help="Why they are suppressed.",
)
def suppressions_import_cmd(file: Path, reason: str) -> None:
    """Suppress every address of a CSV with an email column (a reason column is optional)."""
    with db() as conn:
        try:
            report = suppressions.import_csv(conn, file, reason)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise Fail(f"cannot import {file}: {exc}") from exc
    for line, why in report.rejected:
        click.echo(f"{file}:{line}: rejected: {why}", err=True)
    click.echo(
        f"suppressed {plural(report.added, 'address', 'addresses')};"
        f" {report.already} already {'was' if report.already == 1 else 'were'};"
        f" rejected {plural(len(report.rejected), 'row')}"
    )


@suppressions_group.command("export", epilog=epilog(*DB))
@click.option("--reason", type=click.Choice(suppressions.REASONS), help="Only this reason.")
def suppressions_export_cmd(reason: str | None) -> None:
    """Write the suppression list as CSV (email,reason,created_at,detail) to stdout."""
    with db() as conn:
        suppressions.export_csv(conn, sys.stdout, reason)


def _when(text: str) -> datetime:
    """An ISO 8601 time; without a zone it is this machine's local time."""
    try:
        at = datetime.fromisoformat(text)
    except ValueError as exc:
        raise Fail(f"not an ISO 8601 time: {text!r} (e.g. 2026-06-01T09:00+02:00)") from exc
    try:
        return at if at.tzinfo is not None else at.astimezone()
    except (ValueError, OverflowError) as exc:  # year 1 in local time can fall in year 0
        raise Fail(f"cannot use the time {text!r}: {exc}") from exc


def _send_at(text: str | None) -> datetime | None:
    """--send-at: None when not given; an empty value is an error, not "unscheduled"."""
    if text is None:
        return None
    if not text.strip():
        raise Fail("--send-at is empty: give an ISO 8601 time, or leave --send-at out")
    return _when(text)


def _attributes(pairs: tuple[str, ...], as_json: str | None) -> dict[str, Any] | None:
    found: dict[str, Any] = {}
    if as_json:
        try:
            loaded = json.loads(as_json)
        except ValueError as exc:
            raise Fail(f"--attributes is not valid JSON: {exc}") from exc
        if not isinstance(loaded, dict):
            raise Fail("--attributes must be a JSON object")
        found.update(loaded)
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise Fail(f"--attr takes KEY=VALUE, got {pair!r}")
        found[key.strip()] = value
    return found or None


@campaign.command("schedule")
@click.argument("campaign_id", type=int)
@click.argument("at", required=False)
@click.option("--clear", is_flag=True, help="Unschedule: the draft waits for `campaign send`.")
def schedule_cmd(campaign_id: int, at: str | None, clear: bool) -> None:
    """Send a draft campaign at AT (ISO 8601); `senddock serve` runs the scheduler."""
    if (at is None) == (not clear):
        raise click.UsageError("give a time AT, or --clear")
    when = None if clear else _when(str(at))
    with db() as conn:
        campaigns.refuse_past(conn, when)
        campaigns.schedule(conn, campaign_id, when)
    if when is None:
        click.echo(f"campaign {campaign_id} unscheduled")
    else:
        click.echo(f"campaign {campaign_id} will be sent at {when.isoformat()}")


@campaign.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option("--archived", is_flag=True, help="The archived campaigns instead.")
def list_cmd(as_json: bool, archived: bool) -> None:
    """Every campaign not archived, newest first: id, name, status, counts, created."""
    from senddock.campaigns.listing import all_campaigns

    with db() as conn:
        rows = all_campaigns(conn, archived)
    if as_json:
        click.echo(json.dumps(rows, default=_iso))
        return
    click.echo(
        f"{'ID':>6}  {'STATUS':<9}  {'TOTAL':>7}  {'SENT':>7}  {'FAILED':>6}  {'CANCELLED':>9}"
        f"  {'CREATED':<16}  NAME"
    )
    for r in rows:
        click.echo(
            f"{r['id']:>6}  {r['state']:<9}  {r['total']:>7}  {r['sent']:>7}  {r['failed']:>6}"
            f"  {r['cancelled']:>9}  {r['created_at']:%Y-%m-%d %H:%M}  {r['name']}"
        )


@campaign.command("show")
@click.argument("campaign_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def show_cmd(campaign_id: int, as_json: bool) -> None:
    """A campaign's fields: subject, from, reply-to, lists, schedule, body sizes."""
    from senddock.campaigns.listing import show

    with db() as conn:
        c = show(conn, campaign_id)
    if as_json:
        click.echo(json.dumps(c, default=_iso))
        return
    when = _iso(c["send_at"]) if c["send_at"] else "not scheduled"
    fields = [
        ("name", c["name"]),
        ("status", c["status"]),
        ("subject", c["subject"]),
        ("from", c["from_addr"]),
        ("reply-to", c["reply_to"] or "-"),
        ("lists", ", ".join(c["lists"])),
        ("send at", when + (f" (not sent: {c['schedule_error']})" if c["schedule_error"] else "")),
        ("broadcast", c["broadcast_id"] or "-"),
        ("text body", plural(c["text_bytes"], "byte") if c["text_bytes"] else "- (from the HTML)"),
        ("html body", plural(c["html_bytes"], "byte") if c["html_bytes"] else "-"),
        ("markdown", plural(c["markdown_bytes"], "byte") if c["markdown_bytes"] else "-"),
        ("layout", c["layout"] or "-"),
        ("segment", c["segment"] or "-"),
        ("filter", c["filter"] or "-"),
        ("created", f"{c['created_at']:%Y-%m-%d %H:%M:%S %z}"),
        ("updated", f"{c['updated_at']:%Y-%m-%d %H:%M:%S %z}"),
        ("archived", f"{c['archived_at']:%Y-%m-%d %H:%M:%S %z}" if c["archived_at"] else "no"),
    ]
    click.echo(f"campaign {c['id']}")
    for key, value in fields:
        click.echo(f"  {key:<10} {value}")


@campaign.command("edit", epilog=epilog(*DB))
@click.argument("campaign_id", type=int)
@click.option("--name", help="A new name (a sent campaign's too).")
@click.option("--subject", help="A new Subject: template.")
@click.option("--from", "from_addr", help='A new From, e.g. "Ada <news@example.org>".')
@click.option("--reply-to", help="A new Reply-To; '' removes it.")
@click.option("--text-file", type=click.Path(), help="A new text body.")
@click.option("--html-file", type=click.Path(), help="A new HTML body.")
@click.option("--no-text", is_flag=True, help="Remove the text body (derived from the HTML).")
@click.option("--no-html", is_flag=True, help="Remove the HTML body.")
@click.option("--markdown-file", type=click.Path(), help="A new Markdown body (replaces the HTML).")
@click.option("--layout", help="A layout by name; \"none\": no layout; '': the default one.")
@click.option("--segment", help="A saved segment narrowing the lists; '' for none.")
@click.option("--filter", "audience_filter", help="A filter of its own; '' for none.")
@click.option(
    "--list", "lists", multiple=True, help="The lists it goes to (repeatable; all of them)."
)
def edit_cmd(
    campaign_id: int,
    name: str | None,
    subject: str | None,
    from_addr: str | None,
    reply_to: str | None,
    text_file: str | None,
    html_file: str | None,
    no_text: bool,
    no_html: bool,
    markdown_file: str | None,
    layout: str | None,
    segment: str | None,
    audience_filter: str | None,
    lists: tuple[str, ...],
) -> None:
    """Change a draft, checked like create; a campaign sent or scheduled is refused (its name
    may still change). Prints what changed."""
    from senddock.campaigns import edits

    if (no_text and text_file) or (no_html and html_file):
        raise click.UsageError("give a body file or remove that body, not both")
    changes = edits.Changes(
        name=name,
        subject=subject,
        from_addr=from_addr,
        reply_to=reply_to,
        text_body="" if no_text else _read(text_file, "text file"),
        html_body="" if no_html else _read(html_file, "html file"),
        markdown_body=_read(markdown_file, "markdown file"),
        layout=layout,
        segment=segment,
        audience_filter=audience_filter,
        lists=lists or None,
    )
    if not changes.given():
        raise click.UsageError("nothing to change: give --name, --subject, --list, …")
    with db() as conn:
        changed = edits.edit(conn, campaign_id, changes)
    what = f"changed {edits.said(changed)}" if changed else "nothing changed"
    click.echo(f"campaign {campaign_id}: {what}")


@campaign.command("clone", epilog=epilog(*DB))
@click.argument("campaign_id", type=int)
@click.option("--name", help='The new draft\'s name (default: "NAME (copy)").')
def clone_cmd(campaign_id: int, name: str | None) -> None:
    """Copy any campaign (a sent one too) into a new draft; prints its id alone."""
    from senddock.campaigns import edits

    with db() as conn:
        click.echo(edits.clone(conn, campaign_id, name))


@campaign.command("delete", epilog=epilog(*DB))
@click.argument("campaign_id", type=int)
def delete_cmd(campaign_id: int) -> None:
    """Delete a draft (a campaign that was sent is archived instead)."""
    from senddock.campaigns import edits

    with db() as conn:
        edits.delete(conn, campaign_id)
    click.echo(f"campaign {campaign_id} deleted")


@campaign.command("archive", epilog=epilog(*DB))
@click.argument("campaign_id", type=int)
@click.option("--undo", is_flag=True, help="Put it back in the default list.")
def archive_cmd(campaign_id: int, undo: bool) -> None:
    """Take a sent or cancelled campaign out of `campaign list` (see `list --archived`)."""
    from senddock.campaigns import edits

    with db() as conn:
        edits.archive(conn, campaign_id, archived=not undo)
    click.echo(f"campaign {campaign_id} " + ("unarchived" if undo else "archived"))


@campaign.command("test")
@click.argument("campaign_id", type=int)
@click.option("--to", "addresses", required=True, multiple=True, help="Repeat for more.")
def test_cmd(campaign_id: int, addresses: tuple[str, ...]) -> None:
    """Send the rendered message to the given addresses now, without a broadcast."""
    from senddock.campaigns.trial import send_test

    s = settings()
    with db() as conn:
        results = send_test(conn, campaign_id, list(addresses), s, s)
    failed = 0
    for address, reply in results:
        ok = reply.accepted
        failed += 0 if ok else 1
        click.echo(f"{address}: {'sent' if ok else 'NOT sent'} ({reply.summary()})")
    if failed:
        raise Fail(f"{failed} of {len(results)} test messages were not accepted")


@subscribers.command("add", epilog=epilog(*DB))
@click.argument("address")
@click.option("--name", default="", help="The subscriber's name.")
@click.option("--attr", "attrs", multiple=True, help="KEY=VALUE; repeat for more.")
@click.option("--attributes", "attrs_json", help="A JSON object of attributes.")
@click.option("--list", "lists", multiple=True, help="A list to join (created if new).")
@click.option(
    "--no-confirmation-email", is_flag=True, help="On double opt-in lists, send no request."
)
def subscribers_add_cmd(
    address: str,
    name: str,
    attrs: tuple[str, ...],
    attrs_json: str | None,
    lists: tuple[str, ...],
    no_confirmation_email: bool,
) -> None:
    """Add one subscriber to each --list: confirmed, or on a double opt-in list unconfirmed
    until they follow the link of the confirmation request sent now."""
    with db() as conn:
        sid = subscribers_api.add(conn, address, name, _attributes(attrs, attrs_json), lists)
        click.echo(sid)
        if not no_confirmation_email:
            _request_confirmations(conn, address)


@subscribers.command("update", epilog=epilog(*DB))
@click.argument("address")
@click.option("--name", help="A new name.")
@click.option("--email", "new_email", help="A new address for this subscriber.")
@click.option("--attr", "attrs", multiple=True, help="KEY=VALUE (merged); repeat for more.")
@click.option("--attributes", "attrs_json", help="A JSON object merged in; null removes a key.")
@click.option("--list", "lists", multiple=True, help="A list to join (created if new).")
def subscribers_update_cmd(
    address: str,
    name: str | None,
    new_email: str | None,
    attrs: tuple[str, ...],
    attrs_json: str | None,
    lists: tuple[str, ...],
) -> None:
    """Change a subscriber's name, address or attributes, or add them to lists."""
    with db() as conn:
        subscribers_api.update(
            conn,
            address,
            name=name,
            attributes=_attributes(attrs, attrs_json),
            new_email=new_email,
            lists=lists,
        )
    click.echo(f"{address} updated")


@subscribers.command("remove", epilog=epilog(*DB))
@click.argument("address")
@click.option("--list", "list_name", help="Only leave this list.")
def subscribers_remove_cmd(address: str, list_name: str | None) -> None:
    """Remove a subscriber from a list, or from every list and the database."""
    with db() as conn:
        click.echo(subscribers_api.remove(conn, address, list_name))


@subscribers.command("show", epilog=epilog(*DB))
@click.argument("address")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def subscribers_show_cmd(address: str, as_json: bool) -> None:
    """A subscriber's fields, lists, suppression and latest messages."""
    with db() as conn:
        found = subscribers_api.show(conn, address)
    if as_json:
        click.echo(json.dumps(found, default=str))
        return
    sup = found["suppressed"]
    # Suppressed outranks the stored status: no broadcast sends to them, whatever it says.
    state = f"suppressed ({sup['reason']})" if sup else found["status"]
    click.echo(f"{found['email']}  id {found['id']}  {state}  name {found['name']!r}")
    click.echo(f"  attributes {json.dumps(found['attributes'], ensure_ascii=False)}")
    for m in found["lists"]:
        click.echo(f"  list {m['name']!r}: {m['status']}")
    if sup:
        detail = f": {sup['detail']}" if sup["detail"] else ""
        click.echo(
            f"  suppressed ({sup['reason']}) since {sup['created_at']:%Y-%m-%d %H:%M}{detail};"
            " no broadcast sends to this address (`suppressions remove` to undo)"
        )
    for j in found["messages"]:
        state = j["status"] + (f"/{j['failure']}" if j["failure"] else "")
        click.echo(f"  campaign {j['campaign_id']} {j['campaign']!r}: {state}  {j['message_id']}")


@subscribers.command("consent", epilog=epilog(*DB))
@click.argument("address")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "csv"]),
    default="text",
    show_default=True,
    help="json and csv are for keeping or handing over (CSV cells are spreadsheet-safe).",
)
def subscribers_consent_cmd(address: str, fmt: str) -> None:
    """A subscriber's consent record: each sign-up (time, IP, User-Agent, list, confirmation)
    and each change they made to their lists since, oldest first."""
    with db() as conn:
        found = subscribers_api.show(conn, address, history=0)
        kept = consent.record(conn, int(found["id"]), str(found["email"]))
    if fmt == "json":
        kept.write_json(sys.stdout)
        return
    if fmt == "csv":
        kept.write_csv(sys.stdout)
        return
    click.echo(f"{kept.email}  id {kept.subscriber_id}")
    if not kept.signups and not kept.events:
        click.echo("  no sign-up through the form and no change of their own on record")
    for x in kept.signups:
        opt = "double opt-in" if x.double_opt_in else "single opt-in"
        confirmed = f", confirmed {_iso(x.confirmed_at)}" if x.confirmed_at else ""
        click.echo(
            f"  {_iso(x.requested_at)}  signed up to {x.list_name or '(deleted list)'!r}"
            f" ({opt}{confirmed}) from {x.ip}, {x.user_agent!r}"
        )
        if x.consent_text:
            click.echo(f"    agreed to: {x.consent_text}")
    for e in kept.events:
        what = "every list" if e.action == "unsubscribe_all" else repr(e.list_name or "?")
        via = f", campaign {e.campaign_id}" if e.campaign_id else ""
        click.echo(f"  {_iso(e.created_at)}  {e.action} {what} ({e.source}{via})")


@subscribers.command("erase", epilog=epilog(*DB))
@click.argument("address")
@click.option(
    "--keep-suppressed",
    is_flag=True,
    help="They asked never to be mailed again: keep a SHA-256 of the address suppressed.",
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def subscribers_erase_cmd(address: str, keep_suppressed: bool, yes: bool) -> None:
    """Erase a subscriber now (GDPR article 17): their address, name, attributes, consent and
    preference records leave every table, bounce reports included. Campaign counts stay; their
    messages not sent yet are cancelled. Cannot be undone."""
    if not yes:
        click.confirm(
            f"Erase {address} and everything kept about them? This cannot be undone",
            abort=True,
            err=True,
        )
    with db() as conn:
        done = erasure.erase(conn, address, keep_suppressed=keep_suppressed)
    click.echo(done.summary(address.strip()))


@cli.group("lists")
def lists_group() -> None:
    """Lists and their options (double opt-in)."""


@lists_group.command("show", epilog=epilog(*DB))
def lists_show_cmd() -> None:
    """Every list: options and members by status, its description indented below."""
    with db() as conn:
        for row in lists_api.all_lists(conn):
            opt = f"  double opt-in, from {row['from_addr']}" if row["double_opt_in"] else ""
            opt += "  public sign-up" if row["public"] else ""
            # Members whose address is suppressed are in neither count before (issue 35).
            held = f", {row['suppressed']} suppressed" if row["suppressed"] else ""
            click.echo(
                f"{row['name']}: {row['confirmed']} confirmed, {row['unconfirmed']} unconfirmed,"
                f" {row['unsubscribed']} unsubscribed{held}{opt}"
            )
            for line in (row["description"] or "").splitlines():
                click.echo(f"  {line}")


@lists_group.command("set", epilog=epilog(*DB))
@click.argument("name")
@click.option("--rename", metavar="NEW", help="A new name for the list (it must exist).")
@click.option("--description", metavar="TEXT", help="What the list is about ('' clears it).")
@click.option(
    "--double-opt-in/--single-opt-in",
    default=None,
    help="Whether people added one at a time must confirm by a link first.",
)
@click.option("--from", "from_addr", help="Who confirmation requests come from.")
@click.option(
    "--public/--private",
    default=None,
    help="Whether anyone may sign up through POST /subscribe (see `lists form`).",
)
@click.option(
    "--consent-text",
    metavar="TEXT",
    help="What a sign-up agrees to, shown on the form and kept with each sign-up"
    " ('' restores the default wording).",
)
def lists_set_cmd(
    name: str,
    rename: str | None,
    description: str | None,
    double_opt_in: bool | None,
    from_addr: str | None,
    public: bool | None,
    consent_text: str | None,
) -> None:
    """Create a list or change its name, description and options, in one transaction."""
    with db() as conn, conn.transaction():
        if rename is None:  # made if new
            list_id = lists_api.ensure_list(conn, lists_api.clean_name(name))
        else:  # renaming a list that is not there is a typo, not a new list
            list_id = lists_api.find_list(conn, name)
        lists_api.change(
            conn,
            list_id,
            name=rename,
            description=description,
            double_opt_in=double_opt_in,
            from_addr=from_addr,
            sender="--from",
        )
        signup.set_public(conn, list_id, public)
        if consent_text is not None:
            signup.set_consent_text(conn, list_id, consent_text)
    renamed = "" if rename is None else f" as {lists_api.clean_name(rename)!r}"
    click.echo(f"list {name!r} saved{renamed}")


@lists_group.command("create", epilog=epilog(*DB))
@click.argument("name")
@click.option("--description", metavar="TEXT", default="", help="What the list is about.")
@click.option(
    "--double-opt-in", is_flag=True, help="People added one at a time must confirm by a link."
)
@click.option("--from", "from_addr", help="Who confirmation requests come from.")
@click.option("--public", is_flag=True, help="Anyone may sign up (see `lists form`).")
def lists_create_cmd(
    name: str, description: str, double_opt_in: bool, from_addr: str | None, public: bool
) -> None:
    """Create a new list (refused if the name is taken; `lists set` changes one); its id."""
    with db() as conn, conn.transaction():
        list_id = lists_api.create(
            conn, name, description, double_opt_in=double_opt_in, from_addr=from_addr
        )
        signup.set_public(conn, list_id, public)
    click.echo(list_id)


@lists_group.command("delete", epilog=epilog(*DB))
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def lists_delete_cmd(name: str, yes: bool) -> None:
    """Delete a list and its memberships (its subscribers stay). Refused while a draft,
    scheduled, sending or paused campaign names it."""
    with db() as conn:
        list_id = lists_api.find_list(conn, name)
        if not yes:
            click.confirm(f"Delete list {name!r} and its memberships?", abort=True, err=True)
        click.echo(lists_api.delete(conn, list_id))


@lists_group.command("form", epilog=epilog(*DB, "PUBLIC_URL", "SECRET_KEY"))
@click.argument("name_or_id")
def lists_form_cmd(name_or_id: str) -> None:
    """Print the HTML sign-up form of a list (by name or id), to paste into a web page."""
    s = settings()
    with db() as conn:
        list_id = signup.find(conn, name_or_id)
        row = next(r for r in lists_api.all_lists(conn) if r["id"] == list_id)
        token = signup.form_token(compose.link_key(conn, s), list_id)
    if not row["public"]:
        click.echo(
            f"note: list {row['name']!r} is private: the form works once it is public"
            f" (senddock lists set {row['name']!r} --public)",
            err=True,
        )
    wording = signup.consent_wording(row["name"], row["consent_text"])
    click.echo(signup.form_html(s.public_url, token, row["name"], wording), nl=False)


def _request_confirmations(conn: psycopg.Connection[dict[str, Any]], address: str) -> None:
    """Send the confirmation requests a new membership of a double opt-in list needs."""
    s = settings()
    key = compose.link_key(conn, s)
    for list_name, reply in optin.send_requests(conn, address, key, s, s):
        ok = reply.accepted
        if not ok:
            raise Fail(f"confirmation request for {list_name!r} not sent: {reply.summary()}")
        click.echo(f"confirmation request for {list_name!r} sent to {address}", err=True)


@subscribers.command("confirm", epilog=epilog(*DB))
@click.argument("address")
@click.option("--list", "list_name", required=True, help="The list they confirmed.")
def subscribers_confirm_cmd(address: str, list_name: str) -> None:
    """Confirm a membership by hand (the person confirmed some other way)."""
    with db() as conn:
        sub = subscribers_api.show(conn, address)
        done = optin.confirm(conn, int(sub["id"]), audience.find_list(conn, list_name))
    click.echo(f"{address}: {'confirmed' if done else 'was not waiting for confirmation'}")


@cli.command("serve", epilog=epilog(*WORKER, *WEB))
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
    click.echo(startup_block("serve", s, senders), err=True)
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


@cli.group("token")
def token_group() -> None:
    """API tokens (Authorization: Bearer)."""


@token_group.command("create", epilog=epilog(*DB))
@click.option("--name", default="", help="What the token is for (shown by `token list`).")
@click.option(
    "--expires-in",
    "expires_in",
    help="Refuse it after this long: 90m, 12h, 30d, 2w (default never).",
)
def token_create_cmd(name: str, expires_in: str | None) -> None:
    """Make an API token and print it alone; only its hash is stored, so keep it now."""
    from senddock.web import auth

    life = None
    if expires_in is not None:
        try:
            life = config.duration(expires_in)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--expires-in") from exc
        if life <= 0:
            raise click.BadParameter("must be more than 0", param_hint="--expires-in")
    with db() as conn:
        click.echo(auth.create_token(conn, name, life))


@token_group.command("list", epilog=epilog(*DB))
def token_list_cmd() -> None:
    """Every API token: id, name, when made and last used (never the token itself)."""
    from senddock.web import auth

    with db() as conn:
        rows = auth.list_tokens(conn)
    if not rows:
        click.echo("no API tokens (make one with `senddock token create`)")
    for t in rows:
        used = f"{t['last_used_at']:%Y-%m-%d %H:%M}" if t["last_used_at"] else "never"
        ends = ""
        if t["expires_at"]:
            ends = f"  {'expired' if t['expired'] else 'expires'} {t['expires_at']:%Y-%m-%d %H:%M}"
        click.echo(
            f"token {t['id']}  {t['name'] or '(no name)'}"
            f"  created {t['created_at']:%Y-%m-%d %H:%M}  last used {used}{ends}"
        )


@token_group.command("revoke", epilog=epilog(*DB))
@click.argument("token_id", type=int)
def token_revoke_cmd(token_id: int) -> None:
    """Delete token TOKEN_ID (see `token list`): requests bearing it are refused at once."""
    from senddock.web import auth

    with db() as conn:
        if not auth.revoke_token(conn, token_id):
            raise Fail(f"no API token {token_id} (see `senddock token list`)")
    click.echo(f"token {token_id} revoked")


@cli.group("admin")
def admin_group() -> None:
    """Dashboard logins."""


def _new_password() -> str:
    """A password from a hidden prompt (typed twice) or, when stdin is not a terminal, its
    first line; empty or all-space passwords are refused."""
    if sys.stdin.isatty():
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password.strip():
        raise Fail("no password given (empty or only spaces)")
    return str(password)


@admin_group.command("create", epilog=epilog(*DB))
@click.option("--email", required=True, help="The admin's login (an email address).")
def admin_create_cmd(email: str) -> None:
    """Make a dashboard admin; the password is read from a prompt, or stdin (one line)."""
    from senddock.web import auth

    password = _new_password()
    with db() as conn:
        aid = auth.create_admin(conn, email, password)
    click.echo(f"admin {aid} created for {email.strip()}")


@admin_group.command("list", epilog=epilog(*DB))
def admin_list_cmd() -> None:
    """Every dashboard admin: id, email, when made."""
    from senddock.web import auth

    with db() as conn:
        rows = auth.list_admins(conn)
    if not rows:
        click.echo("no admins (make one with `senddock admin create --email EMAIL`)")
    for a in rows:
        click.echo(f"admin {a['id']}  {a['email']}  created {a['created_at']:%Y-%m-%d %H:%M}")


@admin_group.command("remove", epilog=epilog(*DB))
@click.argument("email")
def admin_remove_cmd(email: str) -> None:
    """Delete the dashboard admin EMAIL: it can no longer log in, and its sessions end."""
    from senddock.web import auth

    with db() as conn:
        if not auth.remove_admin(conn, email):
            raise Fail(f"no admin {email.strip()} (see `senddock admin list`)")
    click.echo(f"admin {email.strip()} removed")


@admin_group.command("password", epilog=epilog(*DB))
@click.argument("email")
def admin_password_cmd(email: str) -> None:
    """Set a new password for admin EMAIL, read from a prompt, or stdin (one line); every
    session of that admin ends."""
    from senddock.web import auth

    password = _new_password()
    with db() as conn:
        found = auth.set_password(conn, email, password)
    if not found:
        raise Fail(f"no admin {email.strip()} (see `senddock admin list`)")
    click.echo(f"password of admin {email.strip()} changed; its sessions are ended")


@cli.group("bounces")
def bounces_group() -> None:
    """Bounces and complaints that come back after the relay's 250."""


@bounces_group.command("parse")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True))
def bounces_parse(files: tuple[str, ...]) -> None:
    """Print what each returned message says, one JSON object per recipient found.

    Keys: file, recipient (as found), kind (hard, soft, policy, complaint, or none for a file
    with no bounce in it), reason (userunknown, mailboxfull, blocked, feedback, …; the kind
    follows from it), status (5.1.1), reply (550), diagnostic. Reads files only.
    """
    from senddock.bounces.parse import parse, read_capped, records

    for file in files:
        try:
            raw = read_capped(file)
        except OSError as exc:
            raise Fail(f"cannot read {file}: {exc.strerror}") from exc
        for record in records(file, parse(raw)):
            click.echo(json.dumps(record, ensure_ascii=False))


# sysexits.h EX_TEMPFAIL: a mail transport (Postfix's pipe) keeps the message and tries again.
EX_TEMPFAIL = 75


class TempFail(Fail):
    """Not recorded now, perhaps later (the database is unreachable): exit 75."""

    exit_code = EX_TEMPFAIL


def _bounce_store(
    s: Settings, url: str, source: str
) -> Callable[[bytes, bounce_store.Recipients], bounce_store.Received]:
    """Store and apply one returned message (one transaction each), with the link key."""
    path = ReturnPath.parse(s.bounce_domain) if s.bounce_domain else None
    soft = effects.SoftLimit(s.soft_bounce_limit, s.soft_bounce_days)

    def store(raw: bytes, to: bounce_store.Recipients) -> bounce_store.Received:
        with connect(url) as conn:
            key = compose.link_key(conn, s)
            return bounce_store.receive(conn, source, raw, to, path, key, soft)

    return store


@bounces_group.command("ingest")
@click.argument("file", default="-", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--recipient", help="The envelope recipient (Postfix pipe: ${original_recipient}).")
def bounces_ingest(file: str, recipient: str | None) -> None:
    """Record one returned message (a file, or - for stdin) and apply what it says.

    Exit 0 once it is recorded, also when it was before; 75 (EX_TEMPFAIL) when the database
    cannot be reached, so that the mail transport keeps it and tries again.
    """
    from senddock.bounces.parse import MAX_BYTES
    from senddock.bounces.poll import envelope_to

    try:
        if file == "-":
            raw = sys.stdin.buffer.read(MAX_BYTES + 1)
        else:
            with open(file, "rb") as handle:
                raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise Fail(f"cannot read {file}: {exc.strerror}") from exc
    s = settings()
    to = recipient or envelope_to(raw)
    try:
        url = current_database(s)
        received = _bounce_store(s, url, "pipe")(raw, to)
    except psycopg.OperationalError as exc:
        raise TempFail(f"cannot reach the database: {_first_line(exc)}") from exc
    except Fail as exc:
        if isinstance(exc.__cause__, psycopg.OperationalError):
            raise TempFail(exc.message) from exc
        raise
    what = "recorded" if received.new else "already recorded"
    click.echo(
        f"message {received.id} {what}: {received.state}"
        + (f", {received.matched} of {received.findings} matched" if received.new else "")
    )


@bounces_group.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", default=2525, show_default=True, type=int, help="Port to listen on (the MX's 25)."
)
def bounces_serve(host: str, port: int) -> None:
    """Be the bounce domain's MX: take returned mail for our return paths until SIGTERM.

    250 only once a message is committed, 451 while the database is unreachable.
    """
    from senddock.bounces.listener import BounceHandler, BounceListener

    s = settings()
    if not s.bounce_domain:
        raise Fail("set SENDDOCK_BOUNCE_DOMAIN: the listener takes mail only for it")
    url = current_database(s)
    store = _bounce_store(s, url, "smtp")
    handler = BounceHandler(
        ReturnPath.parse(s.bounce_domain), store, per_minute=s.bounce_per_minute
    )
    listener = BounceListener(handler, host, port)
    try:
        listener.start()
    except Exception as exc:
        raise Fail(f"cannot listen on {host}:{port}: {_first_line(exc)}") from exc
    click.echo(f"listening for bounces on {host}:{port}", err=True)
    try:  # SIGTERM ends it (SystemExit, the command's handler): in-flight sessions get 421
        threading.Event().wait()
    finally:
        listener.stop()


@bounces_group.command("poll")
@click.option("--once", is_flag=True, help="One pass, then exit.")
@click.option("--every", default=60.0, show_default=True, help="Seconds between passes.")
def bounces_poll(once: bool, every: float) -> None:
    """Read SENDDOCK_BOUNCE_MAILBOX (imap://, imaps://, pop3://, pop3s://): record each
    message, then delete it (after its commit)."""
    from senddock.bounces.poll import Mailbox, poll_once

    s = settings()
    setting = os.environ.get("SENDDOCK_BOUNCE_MAILBOX")
    if not setting:
        raise Fail("set SENDDOCK_BOUNCE_MAILBOX to the mailbox's URL")
    try:
        box = Mailbox.parse(setting)
    except ValueError as exc:
        raise Fail(f"SENDDOCK_BOUNCE_MAILBOX: {exc}") from exc
    store = _bounce_store(s, current_database(s), box.protocol)
    while True:
        done = poll_once(box, store)
        click.echo(
            f"{done.seen} seen, {done.recorded} recorded, {done.duplicates} already recorded"
            + (f"; error: {done.error}" if done.error else ""),
            err=True,
        )
        if once:
            if done.error:
                raise Fail(f"poll: {done.error}")
            return
        time.sleep(every)  # SIGTERM ends it between passes (SystemExit)


@bounces_group.command("list")
@click.option("--campaign", type=int, help="Only findings about this campaign's broadcast.")
@click.option(
    "--kind", type=click.Choice(["hard", "soft", "policy", "complaint"]), help="Only this kind."
)
@click.option(
    "--reason",
    type=click.Choice(sorted(BOUNCE_REASONS)),
    help="Only this reason (userunknown, mailboxfull, blocked, …).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per finding.")
@click.option(
    "--limit", default=100, show_default=True, type=click.IntRange(1), help="At most N findings."
)
def bounces_list(
    campaign: int | None, kind: str | None, reason: str | None, as_json: bool, limit: int
) -> None:
    """The findings recorded, newest first, with their reason and their message's state;
    unmatched ones too.

    Shows the newest --limit; says how many more there are (on stderr with --json)."""
    from senddock.bounces.store import findings

    with db() as conn:
        rows, more = findings(conn, campaign, kind, limit, reason)
        bare = kind in (None, "hard") and reason is None
        at_send = bounced_at_send(conn, campaign) if bare else {}
    for r in rows:
        if as_json:
            click.echo(json.dumps({k: _jsonable(v) for k, v in r.items()}, ensure_ascii=False))
            continue
        about = (
            f"campaign {r['campaign_id']} subscriber {r['subscriber_id']}"
            if r["broadcast_id"] is not None
            else "unmatched"
        )
        click.echo(
            f"{r['created_at']:%Y-%m-%d %H:%M} {r['kind']:<9} {r['reason'] or '-':<15} "
            f"{r['recipient'] or '-'} "
            f"{r['status'] or '-'} {about} (message {r['message']}: {r['state']}, {r['source']})"
        )
    if not as_json and not rows:
        click.echo("no later reports" if at_send else "no findings")
    if more:
        click.echo(f"{more} more (see --limit)", err=as_json)
    # Refusals at RCPT are bounces too, kept with their jobs, not as findings: say where.
    for cid, n in at_send.items():
        click.echo(
            f"campaign {cid}: {plural(n, 'recipient')} refused at RCPT (bounced at send):"
            f" senddock campaign recipients {cid} --status bounced",
            err=as_json,
        )


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


# -- segments (issue 22, part 3) --------------------------------------------------------------


@cli.group("segment")
def segment_group() -> None:
    """Saved filters over subscriber fields and attributes that narrow a campaign's lists."""


@segment_group.command("add", epilog=epilog(*DB))
@click.argument("name")
@click.argument("expression")
def segment_add_cmd(name: str, expression: str) -> None:
    """Save EXPRESSION as segment NAME, e.g. 'attributes.plan in ["pro", "team"]'."""
    from senddock.audience import segments

    with db() as conn:
        found = segments.add(conn, name, expression)
    click.echo(found.id)


@segment_group.command("list", epilog=epilog(*DB))
def segment_list_cmd() -> None:
    """Every saved segment: name and filter."""
    from senddock.audience import segments

    with db() as conn:
        for g in segments.all_segments(conn):
            click.echo(f"{g.name}\t{g.filter}")


@segment_group.command("show", epilog=epilog(*DB))
@click.argument("name")
def segment_show_cmd(name: str) -> None:
    """A segment's filter and how many subscribers it matches now."""
    from senddock.audience import segments

    with db() as conn:
        g = segments.find(conn, name)
        n = segments.count(conn, g.filter)
    click.echo(f"segment {g.name}\n  filter  {g.filter}\n  matches {plural(n, 'subscriber')}")


@segment_group.command("delete", epilog=epilog(*DB))
@click.argument("name")
def segment_delete_cmd(name: str) -> None:
    """Delete a segment no campaign names."""
    from senddock.audience import segments

    with db() as conn:
        segments.delete(conn, name)


@segment_group.command("count", epilog=epilog(*DB))
@click.argument("expression")
@click.option("--list", "list_names", multiple=True, help="Only confirmed members of (repeatable).")
def segment_count_cmd(expression: str, list_names: tuple[str, ...]) -> None:
    """How many active, unsuppressed subscribers EXPRESSION (a filter or a segment's name)
    matches now."""
    from senddock.audience import segments

    with db() as conn:
        lists = [lists_api.find_list(conn, n) for n in list_names] or None
        try:
            text = segments.find(conn, expression).filter
        except segments.UnknownSegment:
            text = expression
        click.echo(segments.count(conn, text, lists))


def _preview_count(campaign_id: int) -> None:
    from senddock.campaigns.audience import audience, preview_count

    with db() as conn:
        who = audience(conn, campaign_id)
        n = preview_count(conn, campaign_id)
    narrowed = f"segment {who.segment}" if who.segment else f"filter {who.filter}"
    click.echo(plural(n, "recipient") + (f" ({narrowed})" if who.filter else ""))


def main() -> None:
    try:
        cli.main(prog_name="senddock", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("senddock: aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        # One line, with the command to get help, instead of click's usage block.
        where = exc.ctx.command_path if exc.ctx else "senddock"
        click.echo(f"senddock: error: {exc.format_message()} (see '{where} --help')", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        if exc.__cause__ is not None:  # shown with -v: what the one line below summarises
            log.debug("the cause of the error below", exc_info=exc.__cause__)
        click.echo(f"senddock: error: {_secret(' '.join(exc.format_message().split()))}", err=True)
        sys.exit(exc.exit_code)
    except SendDockError as exc:  # what a service refused, with the reason, on one line
        log.debug("the error below", exc_info=exc)
        click.echo(f"senddock: error: {_secret(exc.message)}", err=True)
        sys.exit(1)
    except Exception as exc:  # the last guard: one line, and a traceback only with -v
        log.debug("unexpected error", exc_info=True)
        click.echo(
            f"senddock: internal error: {_secret(_first_line(exc))} (run with -v for details)",
            err=True,
        )
        sys.exit(1)
