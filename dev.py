#!/usr/bin/env python3
"""Bootstrap and task runner for senddock. Standard library only; needs Python >= 3.11.

Usage: python3 dev.py COMMAND [ARGS...]

  demo [ARGS]      run `senddock demo ARGS` from .venv
  senddock [ARGS]  run the senddock CLI from .venv
  test [ARGS]      run `python -m pytest ARGS` from .venv (in the repo root)
  lint             ruff check, ruff format --check, mypy (in the repo root)
  sync             only create/update .venv
  lock [ARGS]      regenerate requirements/*.lock with uv (ARGS go to uv, e.g. --upgrade)

Every command but `lock` first makes sure .venv exists and matches requirements/dev.lock:
it installs the lock with --require-hashes, then this project with `pip install --no-deps -e .`,
and skips both while pyproject.toml and the lock files are unchanged (hash in .venv/).
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
STAMP = VENV / ".senddock-deps.sha256"
INPUTS = ("pyproject.toml", "requirements/main.lock", "requirements/dev.lock")
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


def sync() -> None:
    ensure_venv()
    digest = hashlib.sha256()
    for name in INPUTS:
        path = ROOT / name
        if not path.is_file():
            die(f"{name} is missing")
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    want = digest.hexdigest()
    if STAMP.is_file() and STAMP.read_text().strip() == want:
        return
    STAMP.unlink(missing_ok=True)
    print("dev.py: installing requirements/dev.lock and senddock into .venv", file=sys.stderr)
    run(pip("-q", "--require-hashes", "-r", "requirements/dev.lock"), "pip install of dev.lock")
    run(pip("-q", "--no-deps", "-e", "."), "pip install -e . (senddock)")
    STAMP.write_text(want + "\n")


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
    if command not in ("demo", "senddock", "test", "lint", "sync"):
        die(f"unknown command {command!r}; see: python3 dev.py --help")
    sync()
    if command == "demo":
        exec_venv("senddock", ["demo", *args])
    elif command == "senddock":
        exec_venv("senddock", args)
    elif command == "test":
        exec_venv("python", ["-m", "pytest", *args], cwd=ROOT)
    elif command == "lint":
        lint()


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        sys.exit(130)
