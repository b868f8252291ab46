"""`senddock bounces ...`: read, record and list what comes back after the relay's 250."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

import click
import psycopg

from senddock.bounces import store as bounce_store
from senddock.bounces.classify import KIND as BOUNCE_REASONS
from senddock.bounces.listener import BounceHandler, BounceListener
from senddock.bounces.parse import MAX_BYTES, parse, read_capped, records
from senddock.bounces.poll import Mailbox, envelope_to, poll_once
from senddock.bounces.store import findings
from senddock.bounces.verp import ReturnPath
from senddock.campaigns import compose
from senddock.cli.common import Fail, current_database, db, settings
from senddock.config import Settings
from senddock.db import connect
from senddock.queue import bounces as effects
from senddock.queue.counts import bounced_at_send
from senddock.startup import first_line
from senddock.views import dumps
from senddock.words import plural


@click.group("bounces")
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
    for file in files:
        try:
            raw = read_capped(file)
        except OSError as exc:
            raise Fail(f"cannot read {file}: {exc.strerror}") from exc
        for record in records(file, parse(raw)):
            click.echo(dumps(record, ensure_ascii=False))


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
        raise TempFail(f"cannot reach the database: {first_line(exc)}") from exc
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
        raise Fail(f"cannot listen on {host}:{port}: {first_line(exc)}") from exc
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
    with db() as conn:
        page = findings(conn, campaign, kind, limit, reason)
        bare = kind in (None, "hard") and reason is None
        at_send = bounced_at_send(conn, campaign) if bare else {}
    for r in page.items:
        if as_json:
            click.echo(dumps(r, ensure_ascii=False))
            continue
        click.echo(
            f"{r.created_at:%Y-%m-%d %H:%M} {r.kind:<9} {r.reason or '-':<15} "
            f"{r.recipient or '-'} "
            f"{r.status or '-'} {r.about} (message {r.message}: {r.state}, {r.source})"
        )
    if not as_json and not page.items:
        click.echo("no later reports" if at_send else "no findings")
    if page.more:
        click.echo(f"{page.more} more (see --limit)", err=as_json)
    # Refusals at RCPT are bounces too, kept with their jobs, not as findings: say where.
    for cid, n in at_send.items():
        click.echo(
            f"campaign {cid}: {plural(n, 'recipient')} refused at RCPT (bounced at send):"
            f" senddock campaign recipients {cid} --status bounced",
            err=as_json,
        )
