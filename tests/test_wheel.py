"""The wheel ships what `senddock demo` needs and none of the test harness (issue 20, item 7).

The wheel is built from a copy of the sources (pyproject.toml, README.md, src/), so that no
stale build/ folder of the work tree can slip a removed module back in; then installed with
`pip install --no-deps --target` and the demo run from there, on .venv's dependencies.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# What the demo imports at run time beyond the product: the catcher it sends to, the proof at
# the server and the worker process helper.
DEMO_NEEDS = {
    "senddock/demo.py",
    "senddock/testing/__init__.py",
    "senddock/testing/catcher.py",
    "senddock/testing/proof.py",
    "senddock/testing/workers.py",
}

pytestmark = pytest.mark.timeout(400)


def pip(*args: str, cwd: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pip wheel --no-deps .` on a clean copy of the sources."""
    tree = tmp_path_factory.mktemp("tree")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, tree / name)
    shutil.copytree(
        REPO / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    out = tmp_path_factory.mktemp("dist")
    pip("wheel", "--no-deps", "-q", "-w", str(out), ".", cwd=tree)
    (built,) = out.glob("senddock-*.whl")
    return built


def test_the_wheel_holds_the_demo_and_not_the_chaos_harness(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert names >= DEMO_NEEDS, sorted(DEMO_NEEDS - names)
    testing = sorted(n for n in names if n.startswith("senddock/testing/"))
    assert testing == sorted(n for n in DEMO_NEEDS if n.startswith("senddock/testing/")), testing
    assert not [n for n in names if "chaos" in n], sorted(n for n in names if "chaos" in n)
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"senddock", wheel.name.split("-py3")[0] + ".dist-info"}, tops


def test_the_demo_runs_from_the_installed_wheel(wheel: Path, tmp_path: Path) -> None:
    """Installed from the wheel alone (no src/, no tests/ on the path), the demo's proof holds."""
    target = tmp_path / "site"
    pip("install", "--no-deps", "-q", "--target", str(target), str(wheel), cwd=tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SENDDOCK_")}
    env.update(PYTHONPATH=str(target), PYTHONUNBUFFERED="1")

    def python(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    where = python("-c", "import senddock.demo; print(senddock.demo.__file__)", timeout=60)
    assert where.stdout.strip().startswith(str(target)), where.stdout + where.stderr
    demo = python("-m", "senddock", "demo", "--subscribers", "200", timeout=300)
    out = demo.stdout
    assert demo.returncode == 0, out + demo.stderr
    assert "delivered at the server: 196 of 196 deliverable recipients; undelivered: 0" in out
    assert "PROOF HOLDS" in out, out
