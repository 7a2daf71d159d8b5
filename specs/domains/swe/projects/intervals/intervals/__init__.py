"""Half-open integer intervals and sets of them."""

from intervals.interval import Interval
from intervals.intervalset import IntervalSet

__all__ = ["Interval", "IntervalSet"]
