"""A set of integers kept as sorted, disjoint, non-adjacent intervals."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from intervals.interval import Interval


class IntervalSet:
    """Union of intervals, normalised: sorted, no overlaps, no two intervals touching."""

    def __init__(self, intervals: Iterable[Interval] = ()) -> None:
        self._items: list[Interval] = []
        for interval in intervals:
            self.add(interval)

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[int, int]]) -> IntervalSet:
        return cls(Interval(start, end) for start, end in pairs)

    def __iter__(self) -> Iterator[Interval]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"IntervalSet({self.pairs()})"

    def pairs(self) -> list[tuple[int, int]]:
        return [(i.start, i.end) for i in self._items]

    def add(self, interval: Interval) -> None:
        """Add ``interval``, merging it with every interval it touches."""
        if interval.is_empty():
            return
        kept: list[Interval] = []
        merged = interval
        for item in self._items:
            if item.touches(merged):
                merged = merged.hull(item)
            else:
                kept.append(item)
        kept.append(merged)
        kept.sort(key=lambda i: i.start)
        self._items = kept

    def remove(self, interval: Interval) -> None:
        """Remove every integer of ``interval`` from the set."""
        if interval.is_empty():
            return
        kept: list[Interval] = []
        for item in self._items:
            if not item.overlaps(interval):
                kept.append(item)
                continue
            if item.start < interval.start:
                kept.append(Interval(item.start, interval.start))
            if interval.end < item.end:
                kept.append(Interval(interval.end, item.end))
        self._items = kept

    def contains(self, value: int) -> bool:
        return any(item.contains(value) for item in self._items)

    def total_length(self) -> int:
        return sum(len(item) for item in self._items)

    def span(self) -> Interval | None:
        """From the first start to the last end, or ``None`` for an empty set."""
        if not self._items:
            return None
        return Interval(self._items[0].start, self._items[-1].end)

    def gaps(self) -> list[Interval]:
        """The intervals between consecutive members."""
        return [Interval(a.end, b.start) for a, b in zip(self._items, self._items[1:], strict=False)]

    def largest(self, count: int = 1) -> list[Interval]:
        """The ``count`` longest intervals, longest first (earlier first on ties)."""
        ranked = sorted(self._items, key=lambda i: (-len(i), i.start))
        return ranked[:count]
