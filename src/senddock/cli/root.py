"""The `senddock` command. Every failure a person can cause ends in one line and a non-zero exit.

The root group loads a command group's module only when that command runs (click's lazy
loading of subcommands): `senddock worker` imports click, this root and cli/run.py, not the
service layer the other commands use. `senddock --help` loads them all to list them.
"""

from __future__ import annotations

import importlib
import logging
import signal
import sys
from typing import Any

import click

from senddock import startup

log = logging.getLogger("senddock")

# Every top-level command: its name and where it is defined ("module:attribute").
COMMANDS = {
    "admin": "senddock.cli.access:admin_group",
    "bounces": "senddock.cli.bounces:bounces_group",
    "campaign": "senddock.cli.campaign:campaign",
    "demo": "senddock.cli.run:demo_cmd",
    "layout": "senddock.cli.layout:layout",
    "lists": "senddock.cli.audience:lists_group",
    "migrate": "senddock.cli.admin:migrate_cmd",
    "segment": "senddock.cli.audience:segment_group",
    "serve": "senddock.cli.run:serve_cmd",
    "subscribers": "senddock.cli.audience:subscribers",
    "suppressions": "senddock.cli.audience:suppressions_group",
    "token": "senddock.cli.access:token_group",
    "worker": "senddock.cli.run:worker_cmd",
    "workers": "senddock.cli.admin:workers_cmd",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported by name when first asked for."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module, attr = self.lazy[cmd_name].split(":")
        found = getattr(importlib.import_module(module), attr)
        if not isinstance(found, click.Command):
            raise TypeError(f"{self.lazy[cmd_name]} is not a click command")
        return found


@click.group(cls=LazyGroup, lazy=COMMANDS)
@click.version_option(package_name="senddock", prog_name="senddock")
@click.option("-v", "--verbose", is_flag=True, help="Log what SendDock does, with tracebacks.")
def cli(verbose: bool) -> None:
    """SendDock: email broadcasts that survive the process dying at any moment."""
    startup.setup_logging(verbose)
    signal.signal(signal.SIGTERM, startup.exit_on_sigterm)


def main() -> None:
    try:
        cli.main(prog_name="senddock", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo(startup.ABORTED, err=True)
        sys.exit(130)
    except click.UsageError as exc:
        # One line, with the command to get help, instead of click's usage block.
        where = exc.ctx.command_path if exc.ctx else "senddock"
        click.echo(f"senddock: error: {exc.format_message()} (see '{where} --help')", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        if exc.__cause__ is not None:  # shown with -v: what the one line below summarises
            log.debug("the cause of the error below", exc_info=exc.__cause__)
        message = " ".join(exc.format_message().split())
        click.echo(f"senddock: error: {startup.secret(message)}", err=True)
        sys.exit(exc.exit_code)
    except Exception as exc:  # what a service refused (a SendDockError), or the last guard
        click.echo(startup.error_line(exc), err=True)
        sys.exit(1)
