"""Series transforms: moving averages, standard scores, histograms, correlation."""

from __future__ import annotations

import math
from collections.abc import Sequence

from statkit.describe import mean, stdev


def moving_average(values: Sequence[float], window: int = 3) -> list[float]:
    """Means of each run of ``window`` consecutive values (``len - window + 1`` of them)."""
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    if window > len(values):
        return []
    return [mean(values[i : i + window]) for i in range(len(values) - window + 1)]


def zscores(values: Sequence[float]) -> list[float]:
    """How many (sample) standard deviations each value lies from the mean."""
    centre, spread = mean(values), stdev(values)
    if spread == 0:
        return [0.0 for _ in values]
    return [(value - centre) / spread for value in values]


def histogram(values: Sequence[float], bins: int = 4) -> list[int]:
    """Counts in ``bins`` equal-width bins from min to max; the max falls in the last bin."""
    if bins < 1:
        raise ValueError(f"bins must be at least 1, got {bins}")
    if not values:
        return [0] * bins
    low, high = min(values), max(values)
    counts = [0] * bins
    if high == low:
        counts[0] = len(values)
        return counts
    width = (high - low) / bins
    for value in values:
        index = int((value - low) / width)
        if index >= bins:
            index = bins - 1
        counts[index] += 1
    return counts


def correlation(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Pearson's r of two equally long series."""
    if len(xs) != len(ys):
        raise ValueError(f"series lengths differ: {len(xs)} and {len(ys)}")
    if len(xs) < 2:
        raise ValueError("correlation needs at least 2 pairs")
    mx, my = mean(xs), mean(ys)
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=False))
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    if sx == 0 or sy == 0:
        raise ValueError("correlation of a constant series is undefined")
    return cov / (sx * sy)
