"""dev.py installs what a command needs: the demo and the CLI only requirements/main.lock
(~170 MB), the tests and linters requirements/dev.lock (~680 MB, playwright, mypy, ...).

Runs dev.py's own logic on a copy of it in a temp folder, with pip and exec recorded, not run.
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent


class Exec(Exception):
    """dev.py would exec a program of .venv now."""


def load_copy(root: Path) -> ModuleType:
    for name in ("dev.py", "pyproject.toml", "requirements/main.lock", "requirements/dev.lock"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, root / name)
    spec = importlib.util.spec_from_file_location("dev_copy", root / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def installs(dev: Any, monkeypatch: pytest.MonkeyPatch, *argv: str) -> list[str]:
    """The requirement files `python3 dev.py ARGV` would pip-install, in order."""
    done: list[str] = []

    def run(cmd: list[str], what: str) -> None:
        if "-r" in cmd:
            done.append(cmd[cmd.index("-r") + 1])

    def exec_venv(*_: object, **__: object) -> None:
        raise Exec

    monkeypatch.setattr(dev, "run", run)
    monkeypatch.setattr(dev, "exec_venv", exec_venv)
    monkeypatch.setattr(dev, "lint", lambda: None)
    monkeypatch.setattr(dev, "ensure_venv", lambda: dev.VENV.mkdir(exist_ok=True))
    with contextlib.suppress(Exec):
        dev.main(list(argv))
    return done


def test_demo_installs_only_the_main_lock_and_the_tests_the_dev_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dev = load_copy(tmp_path)
    assert installs(dev, monkeypatch, "demo") == ["requirements/main.lock"]
    assert installs(dev, monkeypatch, "demo", "--subscribers", "50") == []
    assert installs(dev, monkeypatch, "senddock", "--version") == []
    assert installs(dev, monkeypatch, "test", "-k", "x") == ["requirements/dev.lock"]
    assert installs(dev, monkeypatch, "lint") == []
    assert installs(dev, monkeypatch, "demo") == []  # dev.lock holds main.lock's packages

    with (tmp_path / "requirements/main.lock").open("a") as f:
        f.write("# changed\n")
    assert installs(dev, monkeypatch, "senddock") == ["requirements/main.lock"]
    assert installs(dev, monkeypatch, "sync") == ["requirements/dev.lock"]
