import datetime
import unittest

from calendar_math import (
    Date,
    add_days,
    add_months,
    add_workdays,
    count_workdays,
    day_of_year,
    days_between,
    days_in_month,
    is_leap,
    is_weekend,
    parse_iso,
    weekday,
)
from calendar_math.dates import from_ordinal, to_ordinal
from calendar_math.workdays import next_weekday


def ref(date):
    return datetime.date(date.year, date.month, date.day)


class CheckDates(unittest.TestCase):
    def test_leap(self):
        self.assertEqual([y for y in (1900, 2000, 2023, 2024, 2100, 2400) if is_leap(y)], [2000, 2024, 2400])

    def test_days_in_month(self):
        self.assertEqual(
            [days_in_month(2023, m) for m in range(1, 13)], [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        )
        self.assertEqual(days_in_month(2024, 2), 29)
        self.assertEqual(days_in_month(1900, 2), 28)
        for bad in (0, 13):
            with self.assertRaises(ValueError):
                days_in_month(2023, bad)

    def test_parse_iso(self):
        self.assertEqual(parse_iso("2024-02-29"), Date(2024, 2, 29))
        self.assertEqual(parse_iso(" 0001-01-01 "), Date(1, 1, 1))
        for bad in ("2023-02-29", "2023-1-32", "2023/01/01", "2023-00-10", "0000-01-01"):
            with self.assertRaises(ValueError):
                parse_iso(bad)

    def test_iso(self):
        self.assertEqual(Date(7, 3, 9).iso(), "0007-03-09")

    def test_day_of_year(self):
        self.assertEqual(day_of_year(Date(2023, 1, 1)), 1)
        self.assertEqual(day_of_year(Date(2023, 12, 31)), 365)
        self.assertEqual(day_of_year(Date(2024, 12, 31)), 366)
        self.assertEqual(day_of_year(Date(2024, 3, 1)), 61)

    def test_ordinal_matches_datetime(self):
        for d in (Date(1, 1, 1), Date(1999, 12, 31), Date(2000, 2, 29), Date(2024, 7, 4), Date(2100, 3, 1)):
            self.assertEqual(to_ordinal(d), ref(d).toordinal())
            self.assertEqual(from_ordinal(to_ordinal(d)), d)
        with self.assertRaises(ValueError):
            from_ordinal(0)

    def test_add_days(self):
        self.assertEqual(add_days(Date(2023, 12, 31)), Date(2024, 1, 1))
        self.assertEqual(add_days(Date(2024, 2, 28), 1), Date(2024, 2, 29))
        self.assertEqual(add_days(Date(2024, 3, 1), -1), Date(2024, 2, 29))
        self.assertEqual(add_days(Date(2020, 1, 15), 1000), Date(2022, 10, 11))

    def test_days_between(self):
        self.assertEqual(days_between(Date(2024, 1, 1), Date(2024, 3, 1)), 60)
        self.assertEqual(days_between(Date(2024, 3, 1), Date(2024, 1, 1)), -60)

    def test_weekday(self):
        self.assertEqual(weekday(Date(1, 1, 1)), "Monday")
        self.assertEqual(weekday(Date(2024, 7, 4)), "Thursday")
        self.assertEqual(weekday(Date(2023, 12, 31)), "Sunday")

    def test_add_months(self):
        self.assertEqual(add_months(Date(2024, 1, 31), 1), Date(2024, 2, 29))
        self.assertEqual(add_months(Date(2023, 1, 31), 1), Date(2023, 2, 28))
        self.assertEqual(add_months(Date(2023, 11, 15), 2), Date(2024, 1, 15))
        self.assertEqual(add_months(Date(2024, 3, 31), -1), Date(2024, 2, 29))
        self.assertEqual(add_months(Date(2024, 12, 1), 12), Date(2025, 12, 1))


class CheckWorkdays(unittest.TestCase):
    def test_weekend(self):
        self.assertTrue(is_weekend(Date(2024, 1, 6)))
        self.assertTrue(is_weekend(Date(2024, 1, 7)))
        self.assertFalse(is_weekend(Date(2024, 1, 8)))

    def test_count_workdays(self):
        self.assertEqual(count_workdays(Date(2024, 1, 1), Date(2024, 1, 8)), 5)
        self.assertEqual(count_workdays(Date(2024, 1, 1), Date(2024, 1, 1)), 0)
        self.assertEqual(count_workdays(Date(2024, 1, 5), Date(2024, 1, 9)), 2)
        self.assertEqual(count_workdays(Date(2024, 1, 8), Date(2024, 1, 1)), 0)
        self.assertEqual(count_workdays(Date(2024, 1, 1), Date(2024, 1, 8), holidays={Date(2024, 1, 1)}), 4)

    def test_add_workdays(self):
        self.assertEqual(add_workdays(Date(2024, 1, 5), 1), Date(2024, 1, 8))
        self.assertEqual(add_workdays(Date(2024, 1, 8), -1), Date(2024, 1, 5))
        self.assertEqual(add_workdays(Date(2024, 1, 3), 0), Date(2024, 1, 3))
        self.assertEqual(add_workdays(Date(2024, 1, 1), 10), Date(2024, 1, 15))
        self.assertEqual(add_workdays(Date(2024, 1, 5), 1, holidays=[Date(2024, 1, 8)]), Date(2024, 1, 9))

    def test_next_weekday(self):
        self.assertEqual(next_weekday(Date(2024, 1, 1), "Monday"), Date(2024, 1, 8))
        self.assertEqual(next_weekday(Date(2024, 1, 1), "Monday", skip_today=False), Date(2024, 1, 1))
        self.assertEqual(next_weekday(Date(2024, 1, 1), "Sunday"), Date(2024, 1, 7))
        with self.assertRaises(ValueError):
            next_weekday(Date(2024, 1, 1), "Funday")


if __name__ == "__main__":
    unittest.main()
