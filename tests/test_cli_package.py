"""The `senddock` command is a package of command groups, each loaded only when its command
runs: `senddock worker` must not pay for (nor hold in memory) the service layer the other
commands use, and `senddock --help` must still list every command."""

from __future__ import annotations

import subprocess
import sys

# What a worker's supervisor never needs: the service layer and the web app above the queue.
HEAVY = ("senddock.audience", "senddock.campaigns", "senddock.web", "senddock.bounces.parse")
COMMANDS = [
    "admin",
    "bounces",
    "campaign",
    "demo",
    "layout",
    "lists",
    "migrate",
    "segment",
    "serve",
    "subscribers",
    "suppressions",
    "token",
    "worker",
    "workers",
]


def _imported(*args: str) -> set[str]:
    """The senddock modules `python -m senddock ARGS` imports (`-X importtime`, on stderr)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "senddock", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    names = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    return {n for n in names if n.startswith("senddock")}


def test_worker_imports_only_the_root_and_its_own_group() -> None:
    found = _imported("worker", "--help")
    assert "senddock.cli.run" in found
    assert not {m for m in found if m.startswith(HEAVY)}, sorted(found)
    assert not {m for m in found if m.startswith("senddock.cli.") and m != "senddock.cli.run"} - {
        "senddock.cli.root",
        "senddock.cli.common",
    }


def test_help_lists_every_command_and_loads_each_group() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "senddock", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    listed = done.stdout.split("Commands:\n", 1)[1].split()
    assert [w for w in listed if w in COMMANDS] == COMMANDS
