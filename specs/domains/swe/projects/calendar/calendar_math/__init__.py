"""Proleptic Gregorian date arithmetic without the datetime module."""

from calendar_math.dates import (
    Date,
    add_days,
    add_months,
    day_of_year,
    days_between,
    days_in_month,
    is_leap,
    parse_iso,
    weekday,
)
from calendar_math.workdays import add_workdays, count_workdays, is_weekend

__all__ = [
    "Date",
    "add_days",
    "add_months",
    "add_workdays",
    "count_workdays",
    "day_of_year",
    "days_between",
    "days_in_month",
    "is_leap",
    "is_weekend",
    "parse_iso",
    "weekday",
]
