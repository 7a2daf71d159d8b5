"""Working days: Monday to Friday, minus optional holidays."""

from __future__ import annotations

from collections.abc import Collection

from calendar_math.dates import Date, add_days, days_between, weekday

WEEKEND = ("Saturday", "Sunday")


def is_weekend(date: Date) -> bool:
    return weekday(date) in WEEKEND


def is_workday(date: Date, holidays: Collection[Date] = ()) -> bool:
    return not is_weekend(date) and date not in holidays


def count_workdays(start: Date, end: Date, holidays: Collection[Date] = ()) -> int:
    """Working days in ``[start, end)``; 0 when ``end`` is not after ``start``."""
    total = 0
    span = days_between(start, end)
    for offset in range(span):
        if is_workday(add_days(start, offset), holidays):
            total += 1
    return total


def add_workdays(date: Date, count: int, holidays: Collection[Date] = ()) -> Date:
    """The date ``count`` working days after ``date`` (before it when negative)."""
    step = 1 if count >= 0 else -1
    remaining = abs(count)
    current = date
    while remaining > 0:
        current = add_days(current, step)
        if is_workday(current, holidays):
            remaining -= 1
    return current


def next_weekday(date: Date, name: str, skip_today: bool = True) -> Date:
    """The next date that is a ``name`` (``date`` itself counts unless ``skip_today``)."""
    if name not in ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"):
        raise ValueError(f"unknown weekday {name!r}")
    current = add_days(date, 1) if skip_today else date
    while weekday(current) != name:
        current = add_days(current, 1)
    return current
