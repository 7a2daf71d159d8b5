import unittest

from intervals import Interval, IntervalSet


class IntervalTest(unittest.TestCase):
    def test_length_and_membership(self):
        i = Interval(2, 6)
        self.assertEqual(len(i), 4)
        self.assertTrue(i.contains(2))
        self.assertFalse(i.contains(6))

    def test_reversed_bounds_are_refused(self):
        with self.assertRaises(ValueError):
            Interval(5, 1)

    def test_overlap_and_intersection(self):
        self.assertTrue(Interval(0, 5).overlaps(Interval(4, 9)))
        self.assertEqual(Interval(0, 5).intersection(Interval(3, 9)), Interval(3, 5))

    def test_split(self):
        self.assertEqual(Interval(0, 10).split(4), (Interval(0, 4), Interval(4, 10)))


class IntervalSetTest(unittest.TestCase):
    def test_add_merges_overlapping(self):
        s = IntervalSet.from_pairs([(0, 3), (2, 6), (10, 12)])
        self.assertEqual(s.pairs(), [(0, 6), (10, 12)])

    def test_total_length(self):
        self.assertEqual(IntervalSet.from_pairs([(0, 3), (5, 7)]).total_length(), 5)


if __name__ == "__main__":
    unittest.main()
