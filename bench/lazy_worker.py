"""`senddock worker` as it runs once the command line is a lazy package (issue 36, item 1).

    .venv/bin/python bench/lazy_worker.py [--processes N] [--concurrency C]

This process imports what that command's parent will: Click and the supervisor
(delivery/processes.py), nothing else; the launcher (checks and imports), the workers and the
death notes import the command line in their forked children. `bench/worker_memory.py
--direct` measures it; tests/test_worker_processes.py checks that this process loads none of
a worker's modules.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys

import click  # noqa: F401  (the lazy command line's root group imports it)

from senddock.delivery import processes as supervisor


def prepare(concurrency: int, processes: int) -> None:
    from senddock import cli

    cli._prepare_worker(concurrency, processes)


def work(concurrency: int) -> int:
    from senddock import cli

    return cli._worker_process(concurrency)


def note(pid: int, started: str, reason: str) -> None:
    from senddock import cli

    cli._note_exit(pid, started, reason)


def release() -> None:
    from senddock import cli

    cli._release_embedded()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=5)
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    prepare_ = functools.partial(prepare, args.concurrency, args.processes)
    work_ = functools.partial(work, args.concurrency)
    code = supervisor.run_processes(args.processes, work_, prepare=prepare_, note=note)
    supervisor.in_child(release, at_exit=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
