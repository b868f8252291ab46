"""Who may use the API and the dashboard: `token`, `admin` (web/auth.py)."""

from __future__ import annotations

import sys

import click

from senddock import config
from senddock.cli.common import DB, Fail, db, epilog
from senddock.web import auth


@click.group("token")
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
    with db() as conn:
        if not auth.revoke_token(conn, token_id):
            raise Fail(f"no API token {token_id} (see `senddock token list`)")
    click.echo(f"token {token_id} revoked")


@click.group("admin")
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
    password = _new_password()
    with db() as conn:
        aid = auth.create_admin(conn, email, password)
    click.echo(f"admin {aid} created for {email.strip()}")


@admin_group.command("list", epilog=epilog(*DB))
def admin_list_cmd() -> None:
    """Every dashboard admin: id, email, when made."""
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
    with db() as conn:
        if not auth.remove_admin(conn, email):
            raise Fail(f"no admin {email.strip()} (see `senddock admin list`)")
    click.echo(f"admin {email.strip()} removed")


@admin_group.command("password", epilog=epilog(*DB))
@click.argument("email")
def admin_password_cmd(email: str) -> None:
    """Set a new password for admin EMAIL, read from a prompt, or stdin (one line); every
    session of that admin ends."""
    password = _new_password()
    with db() as conn:
        found = auth.set_password(conn, email, password)
    if not found:
        raise Fail(f"no admin {email.strip()} (see `senddock admin list`)")
    click.echo(f"password of admin {email.strip()} changed; its sessions are ended")
