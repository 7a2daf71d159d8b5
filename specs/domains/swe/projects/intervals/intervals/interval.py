"""A half-open interval ``[start, end)`` of integers."""

from __future__ import annotations


class Interval:
    """The integers ``start <= x < end``; an interval with ``start == end`` is empty."""

    def __init__(self, start: int, end: int) -> None:
        if start > end:
            raise ValueError(f"interval start {start} is after its end {end}")
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"Interval({self.start}, {self.end})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Interval):
            return NotImplemented
        return (self.start, self.end) == (other.start, other.end)

    def __hash__(self) -> int:
        return hash((self.start, self.end))

    def __len__(self) -> int:
        return self.end - self.start

    def is_empty(self) -> bool:
        return self.start == self.end

    def contains(self, value: int) -> bool:
        """Whether ``value`` lies in the interval (the end is excluded)."""
        return self.start <= value < self.end

    def overlaps(self, other: Interval) -> bool:
        """Whether the two intervals share at least one integer."""
        if self.is_empty() or other.is_empty():
            return False
        return self.start < other.end and other.start < self.end

    def touches(self, other: Interval) -> bool:
        """Whether the intervals overlap or are adjacent (one ends where the other starts)."""
        return self.start <= other.end and other.start <= self.end

    def intersection(self, other: Interval) -> Interval | None:
        """The common part, or ``None`` when the intervals do not overlap."""
        if not self.overlaps(other):
            return None
        return Interval(max(self.start, other.start), min(self.end, other.end))

    def hull(self, other: Interval) -> Interval:
        """The smallest interval containing both."""
        return Interval(min(self.start, other.start), max(self.end, other.end))

    def shift(self, delta: int = 1) -> Interval:
        """The interval moved by ``delta``."""
        return Interval(self.start + delta, self.end + delta)

    def expand(self, amount: int = 1) -> Interval:
        """The interval grown by ``amount`` on both sides (shrunk when negative, never below empty)."""
        start, end = self.start - amount, self.end + amount
        if start > end:
            middle = (self.start + self.end) // 2
            return Interval(middle, middle)
        return Interval(start, end)

    def split(self, at: int) -> tuple[Interval, Interval]:
        """Two intervals ``[start, at)`` and ``[at, end)``; ``at`` is clamped into the interval."""
        at = min(max(at, self.start), self.end)
        return Interval(self.start, at), Interval(at, self.end)

    def chunks(self, size: int) -> list[Interval]:
        """Consecutive pieces of length ``size`` (the last one may be shorter)."""
        if size <= 0:
            raise ValueError(f"chunk size must be positive, got {size}")
        pieces = []
        start = self.start
        while start < self.end:
            pieces.append(Interval(start, min(start + size, self.end)))
            start += size
        return pieces

    def distance(self, other: Interval) -> int:
        """How many integers lie between the two intervals (0 when they touch or overlap)."""
        if self.touches(other):
            return 0
        if self.end < other.start:
            return other.start - self.end
        return self.start - other.end
