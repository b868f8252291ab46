#!/usr/bin/env python3
"""Bootstrap and task runner for senddock. Standard library only; needs Python >= 3.11.

Usage: python3 dev.py COMMAND [ARGS...]

  demo [ARGS]      run `senddock demo ARGS` from .venv
  senddock [ARGS]  run the senddock CLI from .venv
  test [ARGS]      run `python -m pytest ARGS` from .venv (in the repo root)
  test --fast      only the unit and queue tests (FAST in tests/conftest.py)
  lint             ruff check, ruff format --check, mypy, lint-imports (in the repo root)
  schema           regenerate db/schema.sql from a freshly migrated database (embedded
                   Postgres, or SENDDOCK_TEST_DATABASE_URL's server, as the tests)
  sync             only create/update .venv (with the dev tools)
  lock [ARGS]      regenerate requirements/*.lock with uv (ARGS go to uv, e.g. --upgrade)

Every command but `lock` first makes sure .venv exists and holds what it needs: `demo`,
`senddock` and `schema` need requirements/main.lock (what SendDock runs on), `test`, `lint` and
`sync` need requirements/dev.lock (main.lock's packages, same versions, plus pytest, mypy,
playwright, ...). It installs the lock with --require-hashes, then this project with
`pip install --no-deps -e .`, and skips both while pyproject.toml and that lock are unchanged
(a hash in .venv/ per lock).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
# What each lock's install depends on, and the hash of it stored once installed. dev.lock is
# compiled with `-c requirements/main.lock`: installing it installs main.lock's packages too.
NEEDS = {
    "requirements/main.lock": ("pyproject.toml", "requirements/main.lock"),
    "requirements/dev.lock": ("pyproject.toml", "requirements/main.lock", "requirements/dev.lock"),
}
STAMPS = {
    "requirements/main.lock": VENV / ".senddock-main.sha256",
    "requirements/dev.lock": VENV / ".senddock-deps.sha256",
}
UV = "uv==0.13.9"
COMPILE = ["pip", "compile", "pyproject.toml", "--universal", "--python-version", "3.11"]
COMPILE += ["--generate-hashes", "--no-header", "--quiet"]
LOCKS = {
    "requirements/main.lock": [],
    "requirements/dev.lock": ["--extra", "dev", "-c", "requirements/main.lock"],
}
HEADER = """\
# {name}: generated, do not edit by hand. Python >= 3.11, any platform (uv --universal).
# Regenerate both lock files from the repo root with `python3 dev.py lock` (extra arguments,
# e.g. --upgrade or --upgrade-package NAME, are passed to uv), which runs:
#   .venv/bin/python -m pip install {uv}
{commands}
# Install (no uv needed): pip install --require-hashes -r requirements/dev.lock
#                         pip install --no-deps -e .
"""


def die(message: str) -> NoReturn:
    print(f"dev.py: error: {message}", file=sys.stderr)
    sys.exit(1)


def run(cmd: Sequence[str], what: str) -> None:
    code = subprocess.run(cmd, cwd=ROOT).returncode
    if code:
        die(f"{what} failed (exit {code}); to start over: rm -rf .venv")


def ensure_venv() -> None:
    if (BIN / "python").exists():
        return
    print("dev.py: creating .venv", file=sys.stderr)
    try:
        venv.EnvBuilder(with_pip=True).create(VENV)
    except (OSError, subprocess.CalledProcessError) as exc:
        die(f"could not create .venv ({exc}); on Debian: apt-get install python3-venv")


def pip(*args: str) -> list[str]:
    return [str(BIN / "python"), "-m", "pip", "install", "--disable-pip-version-check", *args]


def digest(lock: str) -> str:
    """The hash of the files an install of `lock` depends on."""
    found = hashlib.sha256()
    for name in NEEDS[lock]:
        path = ROOT / name
        if not path.is_file():
            die(f"{name} is missing")
        found.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return found.hexdigest()


def installed(lock: str) -> bool:
    stamp = STAMPS[lock]
    return stamp.is_file() and stamp.read_text().strip() == digest(lock)


def sync(lock: str = "requirements/dev.lock") -> None:
    """Make .venv hold `lock` and this project; main.lock is also held once dev.lock is."""
    ensure_venv()
    if installed(lock) or (lock == "requirements/main.lock" and installed("requirements/dev.lock")):
        return
    STAMPS[lock].unlink(missing_ok=True)
    print(f"dev.py: installing {lock} and senddock into .venv", file=sys.stderr)
    run(pip("-q", "--require-hashes", "-r", lock), f"pip install of {lock}")
    run(pip("-q", "--no-deps", "-e", "."), "pip install -e . (senddock)")
    STAMPS[lock].write_text(digest(lock) + "\n")
    if lock == "requirements/dev.lock":  # it holds main.lock's packages, same versions
        STAMPS["requirements/main.lock"].write_text(digest("requirements/main.lock") + "\n")


def exec_venv(program: str, args: Sequence[str], cwd: Path | None = None) -> NoReturn:
    path = BIN / program
    env = dict(os.environ, VIRTUAL_ENV=str(VENV))
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    env.pop("PYTHONHOME", None)
    if cwd is not None:
        os.chdir(cwd)
    try:
        os.execve(path, [str(path), *args], env)
    except OSError as exc:
        die(f"cannot run {path}: {exc}")


def lint() -> None:
    checks = [
        ["ruff", "check"],
        ["ruff", "format", "--check"],
        ["mypy"],
        ["mypy", "dev.py"],
        ["lint-imports"],  # the layer rules: [tool.importlinter] in pyproject.toml
    ]
    failed = []
    for check in checks:
        print(f"dev.py: $ {' '.join(check)}", file=sys.stderr, flush=True)
        if subprocess.run([str(BIN / check[0]), *check[1:]], cwd=ROOT).returncode:
            failed.append(" ".join(check))
    if failed:
        die(f"lint failed: {'; '.join(failed)}")
    print("dev.py: lint ok", file=sys.stderr)


def lock(args: Sequence[str]) -> None:
    ensure_venv()
    uv = BIN / "uv"
    if not uv.exists():
        run(pip("-q", UV), f"pip install {UV}")
    commands = "\n".join(
        f"#   uv {' '.join(COMPILE + extra)} -o {name}" for name, extra in LOCKS.items()
    )
    for name, extra in LOCKS.items():
        run([str(uv), *COMPILE, *extra, *args, "-o", name], f"uv pip compile -o {name}")
        out = ROOT / name
        header = HEADER.format(name=name, uv=UV, commands=commands)
        out.write_text(header + out.read_text())
    print("dev.py: wrote " + ", ".join(LOCKS), file=sys.stderr)


def main(argv: Sequence[str]) -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - friendly message on an old python3
        die(f"Python >= 3.11 is required, this is {sys.version.split()[0]}")
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__)
        sys.exit(0 if argv else 2)
    command, args = argv[0], list(argv[1:])
    if command == "lock":
        return lock(args)
    if command not in ("demo", "senddock", "test", "lint", "sync", "schema"):
        die(f"unknown command {command!r}; see: python3 dev.py --help")
    # The demo and the CLI need only what SendDock runs on: a .venv of 173 MB, not 680.
    main_only = ("demo", "senddock", "schema")
    sync("requirements/main.lock" if command in main_only else "requirements/dev.lock")
    if command == "demo":
        exec_venv("senddock", ["demo", *args])
    elif command == "senddock":
        exec_venv("senddock", args)
    elif command == "test":
        exec_venv("python", ["-m", "pytest", *args], cwd=ROOT)
    elif command == "lint":
        lint()
    elif command == "schema":
        exec_venv("python", ["-m", "senddock.db.catalog", "db/schema.sql"], cwd=ROOT)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        sys.exit(130)
