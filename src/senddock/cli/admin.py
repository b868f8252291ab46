"""The schema and the workers: `migrate`, `workers`."""

from __future__ import annotations

import click

from senddock import views
from senddock.cli.common import DB, db, epilog, settings
from senddock.db import migrate
from senddock.delivery.rescuer import list_workers
from senddock.words import plural


@click.command("migrate", epilog=epilog(*DB))
def migrate_cmd() -> None:
    """Create or update the database schema (idempotent; safe while workers run)."""
    with db(require_schema=False) as conn:
        done = migrate(conn)
    click.echo(f"applied {', '.join(done)}" if done else "schema is current")


@click.command("workers", epilog=epilog(*DB))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def workers_cmd(as_json: bool) -> None:
    """Registered workers: health, last heartbeat (database clock) and the jobs each holds."""
    lease = settings().lease_seconds
    with db() as conn:
        rows = list_workers(conn, lease)
    if as_json:
        click.echo(views.dumps(rows, default=str))
        return
    if not rows:
        click.echo("no workers registered")
    for w in rows:
        click.echo(
            f"worker {w.id}  {w.health}  {w.host} pid {w.pid}"
            f"  senders {w.concurrency}  heartbeat {w.heartbeat_age:.1f}s ago"
            f"  holding {plural(w.holding, 'job')}"
            + (
                f"  (silent past the {lease:g} s lease: a live worker rescues its jobs)"
                if w.health == "dead"
                else ""
            )
        )
