"""Durations as settings read them (`duration`) and as pages show them (`spoken`)."""

from __future__ import annotations

import pytest

from senddock.config import duration, spoken


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.5, "0.5 s"),
        (30, "30 s"),
        (60, "1 min"),
        (480, "8 min"),
        (5400, "1 h 30 min"),
        (43_200, "12 h"),
        (86_400, "1 day"),
        (1_209_600, "14 days"),
        (90_061, "1 day 1 h 1 min 1 s"),
    ],
)
def test_a_duration_is_shown_in_the_units_a_person_reads(seconds: float, shown: str) -> None:
    assert spoken(seconds) == shown


@pytest.mark.parametrize("written", ["90", "90s", "15m", "12h", "30d", "2w"])
def test_a_written_duration_is_shown_as_the_same_length(written: str) -> None:
    seconds = duration(written)
    parts = spoken(seconds).split()
    total = sum(
        float(n) * {"s": 1, "min": 60, "h": 3600, "day": 86400, "days": 86400}[unit]
        for n, unit in zip(parts[::2], parts[1::2], strict=True)
    )
    assert total == seconds
