"""The queue's model-based test (tests/test_queue_model.py), run for as long as asked.

    .venv/bin/python bench/model_queue.py --minutes 15 --steps 50
    .venv/bin/python bench/model_queue.py --examples 200 --steps 30 --database postgresql://...

Runs batches of hypothesis examples (each from an empty database, up to --steps operations)
against an embedded Postgres (or a server given by URL) and a real `senddock serve`, until the
time or the examples are spent; prints the runs and steps tried. Exits 1 at the first failure,
with the shrunk sequence of operations that breaks the model.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hypothesis.stateful import run_state_machine_as_test

# The model is test code, kept out of the package: it lives beside the tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from speed import database
from test_queue_model import machine, model_settings, real_cli_status
from web_support import make_token, start_server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=15.0, help="stop after this long")
    parser.add_argument("--examples", type=int, default=0, help="stop after this many (0: none)")
    parser.add_argument("--steps", type=int, default=50, help="operations a run, at most")
    parser.add_argument("--batch", type=int, default=20, help="examples per hypothesis call")
    parser.add_argument("--database", help="a Postgres server URL (default: embedded)")
    args = parser.parse_args()
    deadline = time.monotonic() + args.minutes * 60
    runs = steps = 0
    started = time.monotonic()
    with database(args.database) as (url, _):
        server = start_server(
            url, "smtp://127.0.0.1:1", workers=False, args=("--schedule-every", "0")
        )
        try:
            with server.client(make_token(url)) as http:
                while time.monotonic() < deadline and (not args.examples or runs < args.examples):
                    batch = (
                        args.batch if not args.examples else min(args.batch, args.examples - runs)
                    )
                    run = machine(url, http)
                    try:
                        run_state_machine_as_test(run, settings=model_settings(batch, args.steps))
                    finally:
                        runs, steps = runs + run.runs, steps + run.steps
                    for cid, want in run.last.items():
                        assert real_cli_status(url, cid) == want, ("senddock campaign status", cid)
                    minutes = (time.monotonic() - started) / 60
                    print(f"{minutes:6.1f} min: {runs} runs, {steps} steps, no failure", flush=True)
        finally:
            server.stop()
            server.log.unlink(missing_ok=True)
    minutes = (time.monotonic() - started) / 60
    print(f"model_queue: {runs} runs (examples), {steps} steps in {minutes:.1f} min, no failure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
