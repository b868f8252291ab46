"""CSV cells that are safe to open in a spreadsheet, and read back as they were written.

A cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return is a formula to Excel,
LibreOffice and Google Sheets (`=1+1@example.org` is a valid address; a name can be
`=HYPERLINK(...)`). As OWASP recommends for CSV injection, such a cell is written with a
leading apostrophe, which a spreadsheet shows as text and does not keep; our importers take
the apostrophe off again, so an export imports back unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

FORMULA = ("=", "+", "-", "@", "\t", "\r")


def cell(value: Any) -> str:
    """One value as a CSV cell a spreadsheet takes as text."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA) else text


def row(values: Iterable[Any]) -> list[str]:
    return [cell(v) for v in values]


def uncell(text: str) -> str:
    """A cell as `cell` wrote it, read back: the apostrophe before a formula character off."""
    return text[1:] if text.startswith("'") and text[1:2] in FORMULA and len(text) > 1 else text
