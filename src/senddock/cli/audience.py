"""Who gets the campaigns: `subscribers`, `lists`, `segment`, `suppressions`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import psycopg

from senddock import audience
from senddock.audience import consent, erasure, optin, segments, signup, suppressions
from senddock.audience import lists as lists_api
from senddock.audience import subscribers as subscribers_api
from senddock.audience.export import export_subscribers
from senddock.campaigns import compose
from senddock.cli.common import DB, Fail, db, epilog, iso, settings
from senddock.delivery import oneoff
from senddock.views import dumps
from senddock.words import plural


@click.group()
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


@click.group("suppressions")
def suppressions_group() -> None:
    """Addresses no broadcast sends to: bounced, unsubscribed, complained, or added by hand."""


@suppressions_group.command("list", epilog=epilog(*DB))
@click.option("--reason", type=click.Choice(suppressions.REASONS), help="Only this reason.")
def suppressions_list_cmd(reason: str | None) -> None:
    """Every suppressed address with its reason and date."""
    with db() as conn:
        for r in suppressions.rows(conn, reason):
            when = r.created_at.strftime("%Y-%m-%d %H:%M")
            click.echo(f"{r.email}  {r.why}  {when}  {r.detail}".rstrip())


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
        click.echo(dumps(found, default=str))
        return
    sup = found.suppressed
    # Suppressed outranks the stored status: no broadcast sends to them, whatever it says.
    state = f"{found.shown_status} ({sup.reason})" if sup else found.shown_status
    click.echo(f"{found.email}  id {found.id}  {state}  name {found.name!r}")
    click.echo(f"  attributes {json.dumps(found.attributes, ensure_ascii=False)}")
    for m in found.lists:
        click.echo(f"  list {m.name!r}: {m.status}")
    if sup:
        detail = f": {sup.detail}" if sup.detail else ""
        click.echo(
            f"  suppressed ({sup.reason}) since {sup.created_at:%Y-%m-%d %H:%M}{detail};"
            " no broadcast sends to this address (`suppressions remove` to undo)"
        )
    for j in found.messages:
        state = j.status + (f"/{j.failure}" if j.failure else "")
        click.echo(f"  campaign {j.campaign_id} {j.campaign!r}: {state}  {j.message_id}")


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
        kept = consent.record(conn, found.id, found.email)
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
        confirmed = f", confirmed {iso(x.confirmed_at)}" if x.confirmed_at else ""
        click.echo(
            f"  {iso(x.requested_at)}  signed up to {x.list_name or '(deleted list)'!r}"
            f" ({opt}{confirmed}) from {x.ip}, {x.user_agent!r}"
        )
        if x.consent_text:
            click.echo(f"    agreed to: {x.consent_text}")
    for e in kept.events:
        what = "every list" if e.action == "unsubscribe_all" else repr(e.list_name or "?")
        via = f", campaign {e.campaign_id}" if e.campaign_id else ""
        click.echo(f"  {iso(e.created_at)}  {e.action} {what} ({e.source}{via})")


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


@click.group("lists")
def lists_group() -> None:
    """Lists and their options (double opt-in)."""


@lists_group.command("show", epilog=epilog(*DB))
def lists_show_cmd() -> None:
    """Every list: options and members by status, its description indented below."""
    with db() as conn:
        for row in lists_api.all_lists(conn):
            opt = f"  double opt-in, from {row.from_addr}" if row.double_opt_in else ""
            opt += "  public sign-up" if row.public else ""
            # Members whose address is suppressed are in neither count before (issue 35).
            held = f", {row.suppressed} suppressed" if row.suppressed else ""
            click.echo(
                f"{row.name}: {row.confirmed} confirmed, {row.unconfirmed} unconfirmed,"
                f" {row.unsubscribed} unsubscribed{held}{opt}"
            )
            for line in row.description.splitlines():
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
        row = next(r for r in lists_api.all_lists(conn) if r.id == list_id)
        form = signup.list_form(compose.link_key(conn, s), s.public_url, row)
    if not row.public:
        click.echo(
            f"note: list {row.name!r} is private: the form works once it is public"
            f" (senddock lists set {row.name!r} --public)",
            err=True,
        )
    click.echo(form, nl=False)


def _request_confirmations(conn: psycopg.Connection[dict[str, Any]], address: str) -> None:
    """Send the confirmation requests a new membership of a double opt-in list needs."""
    s = settings()
    key = compose.link_key(conn, s)
    for list_name, reply in oneoff.send(s, optin.requests(optin.waiting(conn, address), key, s)):
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
        done = optin.confirm(conn, sub.id, audience.find_list(conn, list_name))
    click.echo(f"{address}: {'confirmed' if done else 'was not waiting for confirmation'}")


@click.group("segment")
def segment_group() -> None:
    """Saved filters over subscriber fields and attributes that narrow a campaign's lists."""


@segment_group.command("add", epilog=epilog(*DB))
@click.argument("name")
@click.argument("expression")
def segment_add_cmd(name: str, expression: str) -> None:
    """Save EXPRESSION as segment NAME, e.g. 'attributes.plan in ["pro", "team"]'."""
    with db() as conn:
        found = segments.add(conn, name, expression)
    click.echo(found.id)


@segment_group.command("list", epilog=epilog(*DB))
def segment_list_cmd() -> None:
    """Every saved segment: name and filter."""
    with db() as conn:
        for g in segments.all_segments(conn):
            click.echo(f"{g.name}\t{g.filter}")


@segment_group.command("show", epilog=epilog(*DB))
@click.argument("name")
def segment_show_cmd(name: str) -> None:
    """A segment's filter and how many subscribers it matches now."""
    with db() as conn:
        g = segments.find(conn, name)
        n = segments.count(conn, g.filter)
    click.echo(f"segment {g.name}\n  filter  {g.filter}\n  matches {plural(n, 'subscriber')}")


@segment_group.command("delete", epilog=epilog(*DB))
@click.argument("name")
def segment_delete_cmd(name: str) -> None:
    """Delete a segment no campaign names."""
    with db() as conn:
        segments.delete(conn, name)


@segment_group.command("count", epilog=epilog(*DB))
@click.argument("expression")
@click.option("--list", "list_names", multiple=True, help="Only confirmed members of (repeatable).")
def segment_count_cmd(expression: str, list_names: tuple[str, ...]) -> None:
    """How many active, unsuppressed subscribers EXPRESSION (a filter or a segment's name)
    matches now."""
    with db() as conn:
        lists = [lists_api.find_list(conn, n) for n in list_names] or None
        try:
            text = segments.find(conn, expression).filter
        except segments.UnknownSegment:
            text = expression
        click.echo(segments.count(conn, text, lists))
