"""Typed values from CSV text fields."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def convert_value(text: str, empty: Any = None) -> Any:
    """``text`` as an int, a float, a bool (true/false, yes/no), or the text itself; ``empty`` for ""."""
    if text == "":
        return empty
    lowered = text.lower()
    if lowered in ("true", "yes"):
        return True
    if lowered in ("false", "no"):
        return False
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def infer_types(records: Sequence[dict[str, str]], empty: Any = None) -> list[dict[str, Any]]:
    """Every field of every record converted with ``convert_value``."""
    return [{key: convert_value(value, empty) for key, value in record.items()} for record in records]


def column(records: Sequence[dict[str, Any]], name: str, skip_missing: bool = True) -> list[Any]:
    """The values of column ``name``; records without it (or with ``None``) are skipped unless
    ``skip_missing`` is false, in which case they give ``None``."""
    values = []
    for record in records:
        value = record.get(name)
        if value is None and skip_missing:
            continue
        values.append(value)
    return values


def summarize(records: Sequence[dict[str, Any]], name: str) -> dict[str, float]:
    """Count, min, max and mean of a numeric column (non-numbers ignored)."""
    numbers = [v for v in column(records, name) if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) < 1:
        raise ValueError(f"column {name!r} has no numbers")
    return {
        "count": len(numbers),
        "min": min(numbers),
        "max": max(numbers),
        "mean": sum(numbers) / len(numbers),
    }
