"""The chaos suite: each fault against a real broadcast, counted at the SMTP server.

    .venv/bin/python bench/chaos.py --all             # full sizes (~10 minutes on 2 cores)
    .venv/bin/python bench/chaos.py --all --small     # the sizes tests/test_chaos.py uses
    .venv/bin/python bench/chaos.py --scenario crash_recovery smtp_stall
    .venv/bin/python bench/chaos.py --all --dot-ms 3   # the relay answers each final dot 3 ms
                                                        # late: envelopes go ahead with the dot

Prints one table and the figures each scenario measured; exits 1 if any recipient was
undelivered, any duplicate appeared where none is allowed, or any scenario check failed.
The scenarios live in tests/chaos_harness.py; logs are kept (and named) when one fails.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

# The harness is test code, kept out of the package: it lives beside the tests that use it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from chaos_harness import SCENARIOS, Harness, Result


def table(results: list[Result], small: bool) -> Table:
    t = Table(title=f"SendDock chaos suite ({'small' if small else 'full'} sizes)")
    t.add_column("scenario")
    for col in ("recipients", "faults injected"):
        t.add_column(col, justify="right")
    t.add_column("delivered exactly once", justify="right")
    t.add_column("duplicates (allowed)", justify="right")
    cols = ("unconfirmed", "unconfirmed accepted", "share accepted", "dot arrived", "undelivered")
    for col in (*cols, "seconds to finish"):
        t.add_column(col, justify="right")
    t.add_column("result")
    for r in results:
        allowed = str(r.duplicates_allowed) if r.duplicates_allowed else "none"
        t.add_row(
            r.scenario,
            f"{r.recipients:,}",
            f"{r.faults} ({r.fault_summary})" if r.faults else "0",
            f"{r.delivered_once:,}",
            f"{r.duplicates} ({allowed})",
            f"{r.unconfirmed}",
            f"{r.unconfirmed_accepted}",
            "–" if r.precision is None else f"{r.precision:.2f}",
            f"{r.unconfirmed_dotted}",
            f"{r.undelivered}",
            f"{r.seconds:.1f}" if r.finished else f"unfinished ({r.seconds:.0f})",
            "[green]ok[/green]" if r.ok else "[red]FAIL[/red]",
        )
    return t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="run every scenario")
    which.add_argument(
        "--scenario", action="extend", nargs="+", choices=list(SCENARIOS), metavar="NAME",
        help=f"run these scenarios (repeatable): {', '.join(SCENARIOS)}",
    )  # fmt: skip
    parser.add_argument("--small", action="store_true", help="the small sizes (as in the tests)")
    parser.add_argument("--seed", type=int, default=20_240_601, help="random moments' seed")
    parser.add_argument("--logs", type=Path, help="keep worker logs in this folder")
    parser.add_argument(
        "--dot-ms",
        type=float,
        default=0.0,
        help="the relay answers each final dot this many ms late (from 1: envelopes go ahead)",
    )
    args = parser.parse_args(argv)
    names = list(SCENARIOS) if args.all else args.scenario
    err = Console(stderr=True)
    results: list[Result] = []
    t0 = time.monotonic()
    harness = Harness(args.logs, seed=args.seed, dot_delay=args.dot_ms / 1000).start()
    try:
        for name in names:
            with err.status(f"{name} ({'small' if args.small else 'full'})…"):
                result = harness.run(name, small=args.small)
            results.append(result)
            err.print(f"{name}: {'ok' if result.ok else 'FAIL'} in {result.seconds:.1f}s")
    finally:
        harness.stop(keep_logs=True if args.logs else None)
    out = Console()
    if not out.is_terminal:  # piped into a file or a report: don't squeeze the table
        out = Console(width=170)
    out.print(table(results, args.small))
    for r in results:
        for line in r.notes:
            out.print(f"  {r.scenario}: {line}", highlight=False)
        for line in r.problems:
            out.print(f"  [red]{r.scenario}: PROBLEM: {line}[/red]", highlight=False)
    failed = [r for r in results if not r.ok]
    if failed and failed[0].logs is not None:
        out.print(f"worker logs kept in {failed[0].logs.parent}", highlight=False)
    unconfirmed = sum(r.unconfirmed for r in results)
    if unconfirmed:
        accepted = sum(r.unconfirmed_accepted for r in results)
        dotted = sum(r.unconfirmed_dotted for r in results)
        out.print(
            f"unconfirmed the server had accepted: {accepted} of {unconfirmed}"
            f" ({accepted / unconfirmed:.2f}); whose final dot reached it: {dotted}"
            f" ({dotted / unconfirmed:.2f})",
            highlight=False,
        )
    late = f", final dots answered {args.dot_ms:g} ms late" if args.dot_ms else ""
    out.print(f"wall time {time.monotonic() - t0:.0f}s (seed {args.seed}{late})", highlight=False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
