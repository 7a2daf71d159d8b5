"""Centre and spread of a sample."""

from __future__ import annotations

import math
from collections.abc import Sequence


def _require(values: Sequence[float], at_least: int, what: str) -> None:
    if len(values) < at_least:
        raise ValueError(f"{what} needs at least {at_least} values, got {len(values)}")


def mean(values: Sequence[float]) -> float:
    _require(values, 1, "mean")
    return sum(values) / len(values)


def median(values: Sequence[float]) -> float:
    """The middle value; the mean of the two middle values for an even count."""
    _require(values, 1, "median")
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2 == 1:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def mode(values: Sequence[float]) -> float:
    """The most frequent value; the smallest one on ties."""
    _require(values, 1, "mode")
    counts: dict[float, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    best = max(counts.values())
    return min(value for value, count in counts.items() if count == best)


def variance(values: Sequence[float], sample: bool = True) -> float:
    """Sample variance (divides by n - 1) or population variance (by n)."""
    _require(values, 2 if sample else 1, "variance")
    centre = mean(values)
    squares = sum((value - centre) ** 2 for value in values)
    return squares / (len(values) - 1 if sample else len(values))


def stdev(values: Sequence[float], sample: bool = True) -> float:
    return math.sqrt(variance(values, sample))


def percentile(values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks; ``p`` in [0, 100]."""
    _require(values, 1, "percentile")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {p}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    fraction = rank - low
    return ordered[low] + (ordered[high] - ordered[low]) * fraction
