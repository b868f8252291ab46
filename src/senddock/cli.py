"""The `senddock` command. Every failure a person can cause ends in one line and a non-zero exit."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import psycopg
from pydantic import ValidationError

from senddock import audience, campaigns
from senddock.audience.addresses import InvalidAddress
from senddock.audience.importer import UnreadableFile
from senddock.audience.lists import UnknownList
from senddock.config import Settings, SmtpTarget, load
from senddock.db import check_current, connect, database_url, migrate
from senddock.db.migrate import MigrationError
from senddock.messages import HeaderError, TemplateProblem

EXPECTED = (
    campaigns.CampaignError,
    InvalidAddress,
    UnknownList,
    UnreadableFile,
    MigrationError,
    TemplateProblem,
    HeaderError,
)


class Fail(click.ClickException):
    """A one-line error for the person at the terminal."""

    def format_message(self) -> str:
        return " ".join(self.message.split())


def settings() -> Settings:
    try:
        s = load()
        SmtpTarget.parse(s.smtp_url)
        s.backoff  # noqa: B018  (parse the schedule now, not mid-broadcast)
    except (ValidationError, ValueError) as exc:
        raise Fail(f"bad configuration: {exc}") from exc
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
    except Exception as exc:  # the embedded server failed to start
        raise Fail(f"cannot start the embedded database: {_first_line(exc)}") from exc
    try:
        if require_schema:
            check_current(conn)
        yield conn
    except EXPECTED as exc:
        raise Fail(str(exc)) from exc
    except psycopg.OperationalError as exc:
        raise Fail(f"database error: {_first_line(exc)}") from exc
    finally:
        conn.close()


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


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Log what the worker does.")
def cli(verbose: bool) -> None:
    """SendDock: email broadcasts that survive the process dying at any moment."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


@cli.command("migrate")
def migrate_cmd() -> None:
    """Create or update the database schema (idempotent; safe while workers run)."""
    with db(require_schema=False) as conn:
        done = migrate(conn)
    click.echo(f"applied {', '.join(done)}" if done else "schema is current")


@cli.group()
def subscribers() -> None:
    """Subscribers and lists."""


@subscribers.command("import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--list", "list_name", required=True, help="List to add them to (created if new).")
def import_cmd(file: Path, list_name: str) -> None:
    """Import a CSV with a header row: column email, optional name."""
    with db() as conn:
        report = audience.import_csv(conn, file, list_name)
    for line, reason in report.rejected:
        click.echo(f"{file}:{line}: rejected: {reason}", err=True)
    click.echo(
        f"imported {report.imported} rows into {list_name!r}; rejected {len(report.rejected)}"
    )


@cli.group()
def campaign() -> None:
    """Create, send and watch campaigns."""


@campaign.command("create")
@click.option("--name", required=True)
@click.option("--list", "list_name", required=True)
@click.option("--subject", required=True)
@click.option("--from", "from_addr", required=True, help='e.g. "Ada <news@example.org>"')
@click.option("--text-file", required=True, type=click.Path(dir_okay=False))
@click.option("--html-file", type=click.Path(dir_okay=False))
def create_cmd(
    name: str, list_name: str, subject: str, from_addr: str, text_file: str, html_file: str | None
) -> None:
    """Create a draft campaign; prints its id alone."""
    text = _read(text_file, "text file")
    assert text is not None
    html = _read(html_file, "html file")
    with db() as conn:
        cid = campaigns.create_campaign(
            conn,
            name=name,
            list_name=list_name,
            subject=subject,
            from_addr=from_addr,
            text_body=text,
            html_body=html,
        )
    click.echo(cid)


@campaign.command("send")
@click.argument("campaign_id", type=int)
def send_cmd(campaign_id: int) -> None:
    """Enqueue the campaign and return at once; workers send it."""
    with db() as conn:
        bid, total, created = campaigns.broadcast(conn, campaign_id)
    if created:
        click.echo(f"campaign {campaign_id}: broadcast {bid} enqueued {total} recipients")
    else:
        click.echo(f"campaign {campaign_id}: already sent as broadcast {bid} ({total} recipients)")


@campaign.command("status")
@click.argument("campaign_id", type=int)
@click.option("--json", "as_json", is_flag=True)
def status_cmd(campaign_id: int, as_json: bool) -> None:
    """Exact counts, read from the queue."""
    with db() as conn:
        st = campaigns.status(conn, campaign_id)
    if as_json:
        click.echo(json.dumps(st))
        return
    click.echo(f"campaign {st['id']} {st['name']!r}: {st['status']}")
    click.echo(
        "  total {total}  pending {pending}  sending {sending}  retry {retry}  sent {sent}"
        "  failed {failed} (bounced {bounced}, suppressed {suppressed}, exhausted {exhausted},"
        " rejected {rejected})".format(**st)
    )
    if st["pause_reason"]:
        click.echo(f"  paused because the relay said: {st['pause_reason']}")


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
        n = campaigns.cancel(conn, campaign_id)
    click.echo(f"campaign {campaign_id} cancelled ({n} messages will not be sent)")


@cli.command("workers")
@click.option("--json", "as_json", is_flag=True)
def workers_cmd(as_json: bool) -> None:
    """Live workers: last heartbeat (database clock) and the jobs each holds."""
    from senddock.delivery.rescuer import list_workers

    with db() as conn:
        rows = list_workers(conn)
    if as_json:
        click.echo(json.dumps(rows, default=str))
        return
    if not rows:
        click.echo("no workers registered")
    for w in rows:
        click.echo(
            f"worker {w['id']}  {w['host']} pid {w['pid']}  senders {w['concurrency']}"
            f"  heartbeat {w['heartbeat_age']:.1f}s ago  holding {w['holding']} jobs"
            + ("  (stopping)" if w["stopping"] else "")
        )


@cli.command("worker")
@click.option("--concurrency", default=5, show_default=True, type=click.IntRange(1, 500))
def worker_cmd(concurrency: int) -> None:
    """Send queued messages until SIGTERM or SIGINT (both finish what is in flight)."""
    from senddock.delivery.worker import run_worker

    s = settings()
    try:
        url = database_url(s)
        with connect(url) as conn:
            check_current(conn)
    except psycopg.OperationalError as exc:
        raise Fail(f"cannot reach the database: {_first_line(exc)}") from exc
    except MigrationError as exc:
        raise Fail(str(exc)) from exc
    sys.exit(run_worker(s, url, concurrency))


@cli.command("demo")
@click.option("--subscribers", "count", default=3000, show_default=True, type=click.IntRange(10))
def demo_cmd(count: int) -> None:
    """Run a whole broadcast on an embedded Postgres and SMTP catcher, with a crash in it."""
    from senddock.demo import run_demo

    sys.exit(run_demo(count))


def main() -> None:
    try:
        cli(prog_name="senddock")
    except Exception as exc:  # the last guard: one line, never a traceback
        logging.getLogger("senddock").debug("unexpected error", exc_info=True)
        click.echo(
            f"senddock: internal error: {_first_line(exc)} (run with -v for details)", err=True
        )
        sys.exit(1)
