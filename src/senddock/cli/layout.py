"""`senddock layout ...`: the layouts a campaign's body goes into (campaigns/layouts.py)."""

from __future__ import annotations

import json
from typing import Any

import click

from senddock.campaigns import layouts, starters
from senddock.cli.common import db, read_file


def _as_dict(row: layouts.LayoutRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "is_default": row.is_default,
        "campaigns": row.campaigns,
        "html_body": row.html_body,
        "text_body": row.text_body,
        "updated_at": row.updated_at.isoformat(),
    }


AS_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


@click.group()
def layout() -> None:
    """Layouts: a header, {{ content }} and a footer, around campaign bodies."""


@layout.command("add")
@click.argument("name")
@click.option("--html-file", type=click.Path(), help="HTML with {{ content }}.")
@click.option("--text-file", type=click.Path(), help="Text with {{ content }} (else derived).")
@click.option(
    "--starter",
    metavar="KEY",
    help="Start from a starter layout instead of --html-file (see `layout starters`).",
)
@click.option("--default", "make_default", is_flag=True, help="Campaigns get it unless told.")
def add_cmd(
    name: str, html_file: str | None, text_file: str | None, starter: str | None, make_default: bool
) -> None:
    """Check and store a layout; prints its id alone."""
    if (html_file is None) == (starter is None):
        raise click.UsageError("give --html-file or --starter (one of them)")
    if starter is not None:
        if text_file is not None:
            raise click.UsageError("--text-file goes with --html-file, not --starter")
        with db() as conn:
            click.echo(starters.add(conn, starter, name, default=make_default))
        return
    html = read_file(html_file, "html file") or ""
    text = read_file(text_file, "text file")
    with db() as conn:
        click.echo(layouts.add_layout(conn, name, html, text, default=make_default))


@layout.command("starters")
def starters_cmd() -> None:
    """The starter layouts `layout add NAME --starter KEY` can begin from."""
    for s in starters.STARTERS:
        click.echo(f"{s.key:<14}{s.description}")


@layout.command("list")
@AS_JSON
def list_cmd(as_json: bool) -> None:
    """Every layout, the default marked, with how many campaigns use it."""
    with db() as conn:
        rows = layouts.list_layouts(conn)
    if as_json:
        click.echo(json.dumps([_as_dict(r) for r in rows], indent=2))
        return
    for r in rows:
        mark = "*" if r.is_default else " "
        click.echo(f"{mark} {r.id:>4}  {r.name}  ({r.campaigns} campaigns)")


@layout.command("show")
@click.argument("name")
@AS_JSON
def show_cmd(name: str, as_json: bool) -> None:
    """A layout's templates."""
    with db() as conn:
        _show(layouts.get_layout(conn, name), as_json)


def _show(row: layouts.LayoutRow, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(_as_dict(row), indent=2))
        return
    click.echo(f"# {row.name}" + (" (default)" if row.is_default else ""))
    click.echo("## html\n" + row.html_body)
    click.echo("## text\n" + (row.text_body or "(derived from the HTML)"))


@layout.command("edit")
@click.argument("name")
@click.option("--name", "new_name", help="A new name.")
@click.option("--html-file", type=click.Path(), help="New HTML with {{ content }}.")
@click.option("--text-file", type=click.Path(), help="New text with {{ content }}.")
@click.option(
    "--derive-text", is_flag=True, help="Forget its own text part (the HTML gives the text)."
)
def edit_cmd(
    name: str, new_name: str | None, html_file: str | None, text_file: str | None, derive_text: bool
) -> None:
    """Change a layout (refused while a broadcast that uses it is under way)."""
    if text_file and derive_text:
        raise click.UsageError("give --text-file or --derive-text, not both")
    text = "" if derive_text else read_file(text_file, "text file")
    with db() as conn:
        layouts.edit_layout(
            conn, name, name=new_name, html_body=read_file(html_file, "html file"), text_body=text
        )


@layout.command("delete")
@click.argument("name")
def delete_cmd(name: str) -> None:
    """Delete a layout no campaign uses."""
    with db() as conn:
        layouts.delete_layout(conn, name)


@layout.command("default")
@click.argument("name", required=False)
@click.option("--clear", is_flag=True, help="No default layout.")
def default_cmd(name: str | None, clear: bool) -> None:
    """Make NAME the default layout; without NAME, print the default's name."""
    with db() as conn:
        if clear:
            layouts.set_default(conn, None)
        elif name:
            layouts.set_default(conn, name)
        else:
            found = layouts.default_layout(conn)
            click.echo(found.name if found else "(no default layout)")
