"""How well `senddock bounces parse` reads real bounces: recall and false suppressions.

    .venv/bin/python bench/bounce_corpus.py

The corpus is flufl.bounce's (Mailman's bounce detector, Apache-2.0): about 115 real bounce
messages from qmail, Exim, Postfix, Sendmail, Exchange, GroupWise, Yahoo, AOL and others,
with the addresses each should yield, permanent or temporary, in its tests/test_detectors.py.
It is downloaded (sdist from PyPI, pinned by hash) into ~/.cache/senddock-bench, not kept
in this repository. Printed per family:
- found: the expected permanently failed addresses read as a failure of any kind;
- suppressed: of those, the ones SendDock would suppress at once (hard or complaint);
- false suppressions: addresses suppressed that the corpus says were not permanent
  failures (delay warnings, non-bounces) or that no expected entry names.
"""

from __future__ import annotations

import ast
import hashlib
import subprocess
import sys
import tarfile
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from senddock.bounces.parse import parse

VERSION = "6.0.0"
SDIST = f"flufl_bounce-{VERSION}.tar.gz"
SHA256 = "a1df16b9d1877ae4536f7d76c00d8421fcefbe694f80f5285d05c45a2547b1bc"
CACHE = Path.home() / ".cache" / "senddock-bench"
SUPPRESSING = ("hard", "complaint")


def corpus() -> Path:
    """The unpacked sdist's tests/ directory, downloaded once and checked against SHA256."""
    tests = CACHE / f"flufl_bounce-{VERSION}" / "tests"
    if tests.is_dir():
        return tests
    CACHE.mkdir(parents=True, exist_ok=True)
    archive = CACHE / SDIST
    if not archive.exists():
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        subprocess.run([*pip, f"flufl.bounce=={VERSION}", "-d", str(CACHE)], check=True)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != SHA256:
        archive.unlink()
        sys.exit(f"{SDIST}: sha256 {digest}, expected {SHA256}")
    with tarfile.open(archive) as tar:
        tar.extractall(CACHE, filter="data")
    return tests


def expectations(tests: Path) -> dict[str, tuple[set[str], set[str]]]:
    """file -> (permanent, temporary) addresses, lowercased, from the DETECTORS table."""
    tree = ast.parse((tests / "test_detectors.py").read_text(encoding="utf-8"))
    table = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "DETECTORS" for t in node.targets)
    )
    rows = ast.literal_eval(table)
    expected: dict[str, tuple[set[str], set[str]]] = defaultdict(lambda: (set(), set()))
    for _module, filename, addresses, temporary in rows:
        permanent, warned = expected[filename]
        (warned if temporary else permanent).update(a.decode().lower() for a in addresses)
    return dict(expected)


def family(filename: str) -> str:
    return filename.rsplit("_", 1)[0]


def main() -> None:
    tests = corpus()
    expected = expectations(tests)
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    wrong: list[str] = []
    for filename, (permanent, warned) in sorted(expected.items()):
        report = parse((tests / "data" / filename).read_bytes())
        kinds = {(f.recipient or "").lower(): f.kind for f in report.findings}
        found = {a for a in permanent if a in kinds}
        suppressed = {a for a in found if kinds[a] in SUPPRESSING}
        false = {a for a, k in kinds.items() if k in SUPPRESSING and a not in permanent}
        row = totals[family(filename)]
        for i, n in enumerate((1, len(permanent), len(found), len(suppressed), len(false))):
            row[i] += n
        for a in sorted(false):
            wrong.append(f"{filename}: {a} suppressed ({kinds[a]}); warned={a in warned}")
        for a in sorted(permanent - found):
            wrong.append(f"{filename}: {a} not found ({report.why_none or 'other recipients'})")
    table = Table(title=f"bounces parse on flufl.bounce {VERSION}'s corpus")
    for heading in ("family", "files", "expected", "found", "suppressed", "false supp."):
        table.add_column(heading, justify="left" if heading == "family" else "right")
    grand = [0, 0, 0, 0, 0]
    for name, row in sorted(totals.items()):
        table.add_row(name, *map(str, row))
        grand = [g + n for g, n in zip(grand, row, strict=True)]
    table.add_row("all", *map(str, grand), style="bold")
    console = Console()
    console.print(table)
    if grand[1]:
        console.print(
            f"recall {grand[2] / grand[1]:.1%} (suppressed at once {grand[3] / grand[1]:.1%}),"
            f" false suppressions {grand[4]}"
        )
    for line in wrong:
        console.print(f"  {line}", markup=False)


if __name__ == "__main__":
    main()
