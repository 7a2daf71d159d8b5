"""Descriptive statistics over plain lists of numbers."""

from statkit.describe import mean, median, mode, percentile, stdev, variance
from statkit.series import correlation, histogram, moving_average, zscores

__all__ = [
    "correlation",
    "histogram",
    "mean",
    "median",
    "mode",
    "moving_average",
    "percentile",
    "stdev",
    "variance",
    "zscores",
]
