"""Counts in messages for people: `1 row`, `2 rows`."""


def plural(n: int, word: str, many: str | None = None) -> str:
    """A count with its noun (`many` when the plural is not word + s)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"
