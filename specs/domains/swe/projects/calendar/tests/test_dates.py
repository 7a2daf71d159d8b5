import unittest

from calendar_math import Date, add_days, add_months, count_workdays, days_in_month, is_leap, weekday


class DatesTest(unittest.TestCase):
    def test_leap_years(self):
        self.assertTrue(is_leap(2024))
        self.assertFalse(is_leap(2023))

    def test_days_in_month(self):
        self.assertEqual(days_in_month(2023, 4), 30)

    def test_add_days(self):
        self.assertEqual(add_days(Date(2023, 1, 30), 5), Date(2023, 2, 4))

    def test_weekday(self):
        self.assertEqual(weekday(Date(2024, 1, 1)), "Monday")

    def test_add_months(self):
        self.assertEqual(add_months(Date(2023, 5, 15), 2), Date(2023, 7, 15))


class WorkdaysTest(unittest.TestCase):
    def test_one_week(self):
        self.assertEqual(count_workdays(Date(2024, 1, 1), Date(2024, 1, 8)), 5)


if __name__ == "__main__":
    unittest.main()
