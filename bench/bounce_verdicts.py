"""Our bounce reasons against Sisimai's, recipient by recipient: a confusion table.

    .venv/bin/python bench/bounce_verdicts.py [../shared/bounces]

Reads a corpus laid out as ../shared/bounces is (corpus/<dir>/<file>, sisimai.jsonl with
Sisimai's verdict per file and recipient, disputed.txt: files left out), parses every file
with `senddock.bounces.parse` in this process and prints, per Sisimai reason: how many
recipients, how many we gave the same reason, how many of each of our kinds, and our most
frequent reasons for it. The figures of grade.py (hard recall, complaint recall, false
suppression) are that script's: run it too.
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from senddock.bounces.parse import parse

KINDS = ("hard", "soft", "policy", "complaint", "none")


def norm(address: str | None) -> str:
    return (address or "").strip().strip("<>").lower()


def main(root: Path) -> None:
    disputed = {line.strip() for line in (root / "disputed.txt").read_text().splitlines()}
    truth = [json.loads(line) for line in (root / "sisimai.jsonl").read_text().splitlines()]
    ours: dict[tuple[str, str], tuple[str, str]] = {}
    for d, f in sorted({(t["dir"], t["file"]) for t in truth}):
        for finding in parse((root / "corpus" / d / f).read_bytes()).findings:
            ours.setdefault((f, norm(finding.recipient)), (finding.kind, str(finding.reason)))
    rows: dict[str, Counter[str]] = defaultdict(Counter)
    named: dict[str, Counter[str]] = defaultdict(Counter)
    for t in truth:
        if t["file"] in disputed or not t["recipient"] or not t["reason"]:
            continue
        kind, reason = ours.get((t["file"], norm(t["recipient"])), ("none", "-"))
        theirs = str(t["reason"])
        rows[theirs]["n"] += 1
        rows[theirs][kind] += 1
        rows[theirs]["same"] += reason == theirs
        named[theirs][reason] += 1
    table = Table(title=f"Sisimai's reason (rows) against ours, {root}")
    for column in ("sisimai", "n", "same", *KINDS, "our reasons"):
        table.add_column(
            column, justify="left" if column in ("sisimai", "our reasons") else "right"
        )
    for theirs, c in sorted(rows.items(), key=lambda kv: -kv[1]["n"]):
        top = ", ".join(f"{r} {n}" for r, n in named[theirs].most_common(3))
        table.add_row(theirs, str(c["n"]), str(c["same"]), *(str(c[k]) for k in KINDS), top)
    Console(width=140).print(table)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/bounces"))
