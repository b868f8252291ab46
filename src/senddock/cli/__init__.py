"""The `senddock` command, one module per command group (root.py loads them lazily)."""

from senddock.cli.root import cli, main
from senddock.cli.run import DEFAULT_CONCURRENCY, MAX_AUTO_PROCESSES, default_processes

__all__ = ["DEFAULT_CONCURRENCY", "MAX_AUTO_PROCESSES", "cli", "default_processes", "main"]
