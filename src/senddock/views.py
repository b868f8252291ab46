"""Typed results as JSON: the one way every face (CLI --json, the API) turns a service's
frozen dataclass into keys and values, so no face picks its own fields or computes a figure.

A dataclass gives its fields, in order, then the derived properties it names in `SHOWN`
(e.g. `SHOWN = ("percent", "done")`); nested dataclasses, lists and tuples follow the same
rule. Times stay `datetime` in `plain()`; `dumps()` writes them as ISO 8601 (`iso`), or as
`str()` gives them with `default=str` where a face has always printed them that way.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from datetime import date, datetime
from typing import Any


def plain(value: Any) -> Any:
    """`value` with every dataclass a dict (its fields, then its SHOWN properties), every
    tuple a list, every mapping a dict; anything else as it is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        found = {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        for name in getattr(value, "SHOWN", ()):
            found[name] = plain(getattr(value, name))
        return found
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def iso(value: Any) -> str:
    """json.dumps's `default`: a time as ISO 8601, anything else as its str()."""
    return value.isoformat() if isinstance(value, (datetime, date)) else str(value)


def dumps(value: Any, default: Callable[[Any], Any] = iso, **options: Any) -> str:
    """`value` (a dataclass, or lists and dicts of them) as JSON text."""
    return json.dumps(plain(value), default=default, **options)
