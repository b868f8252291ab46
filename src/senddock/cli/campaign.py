"""`senddock campaign ...`: create, send, watch and look back at campaigns."""

from __future__ import annotations

import email
import email.message
import email.policy
import json
import sys
import time
from datetime import datetime
from typing import Any

import click
import psycopg
from rich.console import Console
from rich.live import Live
from rich.text import Text

from senddock import campaigns, views
from senddock.campaigns import CampaignStatus, compose, edits, trial
from senddock.campaigns.audience import audience, preview_count
from senddock.campaigns.listing import all_campaigns, show
from senddock.campaigns.recipients import write_csv as write_recipients_csv
from senddock.campaigns.workers import send_warning
from senddock.cli.common import DB, Fail, db, epilog, iso, read_file, settings
from senddock.delivery import oneoff
from senddock.queue.counts import COMPLAINT_LIMIT
from senddock.words import plural


@click.group()
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
@click.option(
    "--track",
    help="Track opens, clicks, both or none, perhaps anonymous (e.g. opens,clicks;"
    " default: SENDDOCK_TRACK, off).",
)
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
    track: str | None,
) -> None:
    """Create a draft campaign; prints its id alone."""
    if text_file is None and html_file is None and markdown_file is None:
        raise click.UsageError("give --text-file, --html-file or --markdown-file")
    text = read_file(text_file, "text file")
    html = read_file(html_file, "html file")
    markdown = read_file(markdown_file, "markdown file")
    when = _send_at(send_at)
    track = campaigns.track_for(track, settings())
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
            track=track,
        )
    click.echo(cid)


@campaign.command("send", epilog=epilog(*DB))
@click.argument("campaign_id", type=int)
def send_cmd(campaign_id: int) -> None:
    """Start the broadcast and return at once; workers enqueue the rest and send it."""
    lease = settings().lease_seconds
    with db() as conn:
        bid, total, created = campaigns.broadcast(conn, campaign_id)
        st = campaigns.status(conn, campaign_id)
        warning = send_warning(conn, lease) if st.status == "sending" else None
    if created:
        click.echo(
            f"campaign {campaign_id}: broadcast {bid} started"
            f" ({plural(total, 'recipient')} enqueued so far; workers enqueue the rest;"
            " see `campaign status`)"
        )
    else:
        click.echo(
            f"campaign {campaign_id}: already {st.status} as broadcast {bid}"
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
        click.echo(json.dumps(st.as_dict(), default=iso))
        return
    if not watch:
        click.echo("\n".join(_status_lines(st)))


def _status_lines(st: CampaignStatus) -> list[str]:
    """`campaign status` as text: a headline, the counts, then why it waits or stopped."""
    c = st.counts
    head = f"campaign {st.id} {st.name!r}: {st.state}"
    if st.status == "cancelled" and st.broadcast_id is not None:
        head += (
            f" ({c.sent} sent, {c.cancelled} cancelled, {c.failed} failed"
            f" of {plural(c.total, 'recipient')}"
        )
        if c.sending:
            head += f"; {c.sending} in flight: their outcome still lands"
        head += ")"
    elif st.status == "draft" and st.send_at is not None:
        head += f", scheduled for {iso(st.send_at)}"
    lines = [
        head,
        "  total {total}  pending {pending}  sending {sending}  retry {retry}  sent {sent}"
        "  failed {failed} (bounced {bounced}, suppressed {suppressed}, exhausted {exhausted},"
        " rejected {rejected})  cancelled {cancelled}  unconfirmed {unconfirmed}".format(
            **c.as_dict()
        ),
    ]
    if st.no_live_worker:
        lines.append(
            "  no live worker: nothing is being sent; start `senddock worker` (jobs a dead"
            " worker held are rescued once one runs)"
        )
    if c.unconfirmed:
        lines.append(
            f"  {c.unconfirmed} unconfirmed: the final dot went and no outcome was recorded;"
            f" `senddock campaign reconcile {st.id}` asks the relay's log and the providers;"
            f" else check the relay's log, then `senddock campaign confirm {st.id}` (they"
            f" went) or `senddock campaign resend-unconfirmed {st.id}` (send them again);"
            " --job ID for only some"
        )
        for u in st.unconfirmed_jobs:
            at = iso(u.dot_at) if u.dot_at else "?"
            lines.append(
                f"    job {u.id}  {u.email}  dot at {at} to {u.relay or '?'} by worker"
                f" {u.worker_id}  {u.message_id}"
            )
            for w in st.said.get(u.id, ()):  # issue 41: what each source said at the last one
                lines.append(f"      {w.source}: {w.said} ({w.detail})")
    if st.broadcast_id is not None:
        lines.append(
            f"  later: {c.bounced_later} bounced, {c.soft_later} soft,"
            f" {c.policy_later} policy, {plural(c.complaints, 'complaint')}"
            f" (rate {c.complaint_rate * 100:.2f} %,"
            f" Gmail's limit {COMPLAINT_LIMIT * 100:.1f} %)"
        )
    if st.track:
        lines += _engagement_lines(st)
    if not st.enqueue_done:
        lines.append(f"  still enqueuing: {plural(c.total, 'recipient')} so far")
    if st.pause_reason:
        lines.append(f"  paused because the relay said: {st.pause_reason}")
    elif st.last_sender_fault:
        lines.append(f"  last reply about us: {st.last_sender_fault}")
    if st.schedule_error:
        lines.append(f"  not sent at its scheduled time: {st.schedule_error}")
    if st.last_problem:
        lines.append(f"  last problem: {st.last_problem}")
    if st.worker_deaths:
        n = st.worker_deaths
        lines.append(
            f"  {n} worker process{'es' if n != 1 else ''} died holding its messages;"
            f" the last: {st.last_worker_death}"
        )
    return lines


def _engagement_lines(st: CampaignStatus) -> list[str]:
    """Opens and clicks (issue 37): people judged human, then machines, then each link."""
    e = st.engagement
    kinds = " and ".join(w for w in st.track.split(",") if w != "anonymous")
    if e.opened is None or e.clicked is None:  # anonymous: events, nobody
        lines = [
            f"  tracking {kinds}, anonymously: {e.opens} opens, {e.clicks} clicks (people are"
            f" not known); machines: {e.opens_machine_events} opens,"
            f" {e.clicks_machine_events} clicks"
        ]
    else:
        lines = [
            f"  tracking {kinds}: opened {e.opened}, clicked {e.clicked} (people;"
            f" {e.opens} opens, {e.clicks} clicks); machines: opened {e.opened_machine},"
            f" clicked {e.clicked_machine} ({e.opens_machine_events} opens,"
            f" {e.clicks_machine_events} clicks)"
        ]
    for link in e.links:
        by = "" if link.unique is None else f" by {plural(link.unique, 'person', 'people')}"
        lines.append(f"    {plural(link.clicks, 'click')}{by} ({link.machine} machine)  {link.url}")
    return lines


def _watch(
    conn: psycopg.Connection[dict[str, Any]], campaign_id: int, st: CampaignStatus
) -> CampaignStatus:
    """Show the status, refreshed every second, until the campaign settles or Ctrl-C."""

    def view(s: CampaignStatus) -> Text:
        return Text("\n".join(_status_lines(s)))

    console = Console(highlight=False)
    try:
        with Live(view(st), console=console, auto_refresh=False) as live:
            while not st.settled:
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
            state = r.status + (f"/{r.failure}" if r.failure else "")
            sent = r.sent_at.strftime("%Y-%m-%d %H:%M:%S") if r.sent_at else "-"
            reply = campaigns.reply_summary(r)
            settled = ""
            if r.settled_by:  # issue 41: who settled it once unconfirmed, and when
                settled = f"  settled by {r.settled_by} at {iso(r.settled_at)}"
            click.echo(
                f"{r.email}  {state}  attempts {r.attempts}  sent {sent}"
                f"  {r.message_id}" + (f"  last reply: {reply}" if reply else "") + settled
            )


@campaign.command("retry-failed")
@click.argument("campaign_id", type=int)
def retry_failed_cmd(campaign_id: int) -> None:
    """Re-queue the failed recipients of a campaign whose address is not suppressed."""
    with db() as conn:
        n = campaigns.retry_failed(conn, campaign_id)
        st = campaigns.status(conn, campaign_id)
    paused = " (the campaign is paused: resume it to send them)" if st.status == "paused" else ""
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
    with db() as conn:
        rows = all_campaigns(conn, archived)
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in rows], default=iso))
        return
    click.echo(
        f"{'ID':>6}  {'STATUS':<9}  {'TOTAL':>7}  {'SENT':>7}  {'FAILED':>6}  {'CANCELLED':>9}"
        f"  {'CREATED':<16}  NAME"
    )
    for r in rows:
        n = r.counts
        click.echo(
            f"{r.id:>6}  {r.state:<9}  {n.total:>7}  {n.sent:>7}  {n.failed:>6}"
            f"  {n.cancelled:>9}  {r.created_at:%Y-%m-%d %H:%M}  {r.name}"
        )


@campaign.command("show")
@click.argument("campaign_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def show_cmd(campaign_id: int, as_json: bool) -> None:
    """A campaign's fields: subject, from, reply-to, lists, schedule, body sizes."""
    with db() as conn:
        c = show(conn, campaign_id)
    if as_json:
        click.echo(views.dumps(c))
        return
    when = iso(c.send_at) if c.send_at else "not scheduled"
    fields = [
        ("name", c.name),
        ("status", c.status),
        ("subject", c.subject),
        ("from", c.from_addr),
        ("reply-to", c.reply_to or "-"),
        ("lists", ", ".join(c.lists)),
        ("send at", when + (f" (not sent: {c.schedule_error})" if c.schedule_error else "")),
        ("broadcast", c.broadcast_id or "-"),
        ("text body", plural(c.text_bytes, "byte") if c.text_bytes else "- (from the HTML)"),
        ("html body", plural(c.html_bytes, "byte") if c.html_bytes else "-"),
        ("markdown", plural(c.markdown_bytes, "byte") if c.markdown_bytes else "-"),
        ("layout", c.layout or "-"),
        ("segment", c.segment or "-"),
        ("filter", c.filter or "-"),
        ("created", f"{c.created_at:%Y-%m-%d %H:%M:%S %z}"),
        ("updated", f"{c.updated_at:%Y-%m-%d %H:%M:%S %z}"),
        ("archived", f"{c.archived_at:%Y-%m-%d %H:%M:%S %z}" if c.archived_at else "no"),
    ]
    click.echo(f"campaign {c.id}")
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
@click.option(
    "--track", help="Track opens, clicks, both or none, perhaps anonymous (e.g. clicks,anonymous)."
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
    track: str | None,
) -> None:
    """Change a draft, checked like create; a campaign sent or scheduled is refused (its name
    may still change). Prints what changed."""
    if (no_text and text_file) or (no_html and html_file):
        raise click.UsageError("give a body file or remove that body, not both")
    changes = edits.Changes(
        name=name,
        subject=subject,
        from_addr=from_addr,
        reply_to=reply_to,
        text_body="" if no_text else read_file(text_file, "text file"),
        html_body="" if no_html else read_file(html_file, "html file"),
        markdown_body=read_file(markdown_file, "markdown file"),
        layout=layout,
        segment=segment,
        audience_filter=audience_filter,
        lists=lists or None,
        track=None if track is None else campaigns.track_for(track, settings()),
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
    with db() as conn:
        click.echo(edits.clone(conn, campaign_id, name))


@campaign.command("delete", epilog=epilog(*DB))
@click.argument("campaign_id", type=int)
def delete_cmd(campaign_id: int) -> None:
    """Delete a draft (a campaign that was sent is archived instead)."""
    with db() as conn:
        edits.delete(conn, campaign_id)
    click.echo(f"campaign {campaign_id} deleted")


@campaign.command("archive", epilog=epilog(*DB))
@click.argument("campaign_id", type=int)
@click.option("--undo", is_flag=True, help="Put it back in the default list.")
def archive_cmd(campaign_id: int, undo: bool) -> None:
    """Take a sent or cancelled campaign out of `campaign list` (see `list --archived`)."""
    with db() as conn:
        edits.archive(conn, campaign_id, archived=not undo)
    click.echo(f"campaign {campaign_id} " + ("unarchived" if undo else "archived"))


@campaign.command("test")
@click.argument("campaign_id", type=int)
@click.option("--to", "addresses", required=True, multiple=True, help="Repeat for more.")
def test_cmd(campaign_id: int, addresses: tuple[str, ...]) -> None:
    """Send the rendered message to the given addresses now, without a broadcast."""
    s = settings()
    with db() as conn:
        built = trial.build(conn, campaign_id, list(addresses), s)
    results = oneoff.send(s, built)  # the relay is answered with no database connection held
    failed = 0
    for address, reply in results:
        ok = reply.accepted
        failed += 0 if ok else 1
        click.echo(f"{address}: {'sent' if ok else 'NOT sent'} ({reply.summary()})")
    if failed:
        raise Fail(f"{failed} of {len(results)} test messages were not accepted")


def _preview_count(campaign_id: int) -> None:
    with db() as conn:
        who = audience(conn, campaign_id)
        n = preview_count(conn, campaign_id)
    narrowed = f"segment {who.segment}" if who.segment else f"filter {who.filter}"
    click.echo(plural(n, "recipient") + (f" ({narrowed})" if who.filter else ""))


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
