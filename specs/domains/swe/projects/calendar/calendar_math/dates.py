"""Dates as (year, month, day) with day counts through an ordinal (day 1 = 0001-01-01)."""

from __future__ import annotations

from typing import NamedTuple

MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


class Date(NamedTuple):
    year: int
    month: int
    day: int

    def iso(self) -> str:
        return f"{self.year:04d}-{self.month:02d}-{self.day:02d}"


def is_leap(year: int) -> bool:
    """Divisible by 4, except centuries, except every fourth century."""
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year: int, month: int) -> int:
    if not 1 <= month <= 12:
        raise ValueError(f"month must be in 1..12, got {month}")
    if month == 2 and is_leap(year):
        return 29
    return MONTH_DAYS[month - 1]


def validate(date: Date) -> Date:
    if date.year < 1:
        raise ValueError(f"year must be at least 1, got {date.year}")
    if not 1 <= date.day <= days_in_month(date.year, date.month):
        raise ValueError(f"day {date.day} is not in {date.year:04d}-{date.month:02d}")
    return date


def parse_iso(text: str) -> Date:
    """``YYYY-MM-DD`` as a valid ``Date``."""
    parts = text.strip().split("-")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"expected YYYY-MM-DD, got {text!r}")
    return validate(Date(int(parts[0]), int(parts[1]), int(parts[2])))


def day_of_year(date: Date) -> int:
    """1 for January 1st."""
    days = date.day
    for month in range(1, date.month):
        days += days_in_month(date.year, month)
    return days


def to_ordinal(date: Date) -> int:
    y = date.year - 1
    return y * 365 + y // 4 - y // 100 + y // 400 + day_of_year(date)


def from_ordinal(ordinal: int) -> Date:
    if ordinal < 1:
        raise ValueError(f"ordinal must be at least 1, got {ordinal}")
    year = max(1, ordinal // 366)
    while to_ordinal(Date(year + 1, 1, 1)) <= ordinal:
        year += 1
    remaining = ordinal - to_ordinal(Date(year, 1, 1))
    month = 1
    while remaining >= days_in_month(year, month):
        remaining -= days_in_month(year, month)
        month += 1
    return Date(year, month, remaining + 1)


def add_days(date: Date, days: int = 1) -> Date:
    return from_ordinal(to_ordinal(validate(date)) + days)


def days_between(start: Date, end: Date) -> int:
    """Days from ``start`` to ``end`` (negative when ``end`` is earlier)."""
    return to_ordinal(end) - to_ordinal(start)


def weekday(date: Date) -> str:
    """The day's name; 0001-01-01 was a Monday."""
    return WEEKDAYS[(to_ordinal(date) - 1) % 7]


def add_months(date: Date, months: int) -> Date:
    """The same day ``months`` later, clamped to the last day of a shorter month."""
    index = date.year * 12 + (date.month - 1) + months
    year, month = divmod(index, 12)
    month += 1
    day = min(date.day, days_in_month(year, month))
    return validate(Date(year, month, day))
