import unittest

from intervals import Interval, IntervalSet


class CheckInterval(unittest.TestCase):
    def test_empty_interval(self):
        self.assertTrue(Interval(3, 3).is_empty())
        self.assertEqual(len(Interval(3, 3)), 0)
        self.assertFalse(Interval(3, 3).contains(3))

    def test_contains_bounds(self):
        i = Interval(-2, 3)
        self.assertEqual([x for x in range(-4, 5) if i.contains(x)], [-2, -1, 0, 1, 2])

    def test_adjacent_intervals_do_not_overlap(self):
        self.assertFalse(Interval(0, 5).overlaps(Interval(5, 9)))
        self.assertFalse(Interval(5, 9).overlaps(Interval(0, 5)))
        self.assertTrue(Interval(0, 6).overlaps(Interval(5, 9)))
        self.assertFalse(Interval(4, 4).overlaps(Interval(0, 9)))

    def test_touches(self):
        self.assertTrue(Interval(0, 5).touches(Interval(5, 9)))
        self.assertFalse(Interval(0, 4).touches(Interval(5, 9)))

    def test_intersection(self):
        self.assertEqual(Interval(0, 10).intersection(Interval(3, 5)), Interval(3, 5))
        self.assertEqual(Interval(2, 8).intersection(Interval(6, 12)), Interval(6, 8))
        self.assertIsNone(Interval(0, 5).intersection(Interval(5, 9)))

    def test_hull(self):
        self.assertEqual(Interval(4, 6).hull(Interval(1, 2)), Interval(1, 6))

    def test_shift_default_and_explicit(self):
        self.assertEqual(Interval(1, 4).shift(), Interval(2, 5))
        self.assertEqual(Interval(1, 4).shift(-3), Interval(-2, 1))

    def test_expand(self):
        self.assertEqual(Interval(5, 8).expand(), Interval(4, 9))
        self.assertEqual(Interval(5, 8).expand(2), Interval(3, 10))
        self.assertEqual(Interval(5, 9).expand(-1), Interval(6, 8))
        self.assertEqual(Interval(5, 9).expand(-5), Interval(7, 7))

    def test_split_clamps(self):
        self.assertEqual(Interval(0, 10).split(3), (Interval(0, 3), Interval(3, 10)))
        self.assertEqual(Interval(0, 10).split(-4), (Interval(0, 0), Interval(0, 10)))
        self.assertEqual(Interval(0, 10).split(15), (Interval(0, 10), Interval(10, 10)))

    def test_chunks(self):
        self.assertEqual(Interval(0, 7).chunks(3), [Interval(0, 3), Interval(3, 6), Interval(6, 7)])
        self.assertEqual(Interval(2, 4).chunks(2), [Interval(2, 4)])
        with self.assertRaises(ValueError):
            Interval(0, 4).chunks(0)

    def test_distance(self):
        self.assertEqual(Interval(0, 3).distance(Interval(7, 9)), 4)
        self.assertEqual(Interval(7, 9).distance(Interval(0, 3)), 4)
        self.assertEqual(Interval(0, 3).distance(Interval(3, 9)), 0)

    def test_reversed_bounds_message(self):
        with self.assertRaises(ValueError):
            Interval(2, 1)
        self.assertEqual(len(Interval(1, 2)), 1)


class CheckIntervalSet(unittest.TestCase):
    def test_adjacent_intervals_merge(self):
        self.assertEqual(IntervalSet.from_pairs([(0, 3), (3, 5)]).pairs(), [(0, 5)])

    def test_add_keeps_sorted_and_separate(self):
        s = IntervalSet.from_pairs([(10, 12), (0, 2), (5, 6)])
        self.assertEqual(s.pairs(), [(0, 2), (5, 6), (10, 12)])
        self.assertEqual(len(s), 3)

    def test_add_bridges_several(self):
        s = IntervalSet.from_pairs([(0, 2), (4, 6), (8, 10)])
        s.add(Interval(1, 9))
        self.assertEqual(s.pairs(), [(0, 10)])

    def test_add_empty_is_ignored(self):
        s = IntervalSet.from_pairs([(0, 2), (4, 4)])
        self.assertEqual(s.pairs(), [(0, 2)])

    def test_remove_middle(self):
        s = IntervalSet.from_pairs([(0, 10)])
        s.remove(Interval(3, 5))
        self.assertEqual(s.pairs(), [(0, 3), (5, 10)])

    def test_remove_edges(self):
        s = IntervalSet.from_pairs([(0, 4), (6, 10)])
        s.remove(Interval(2, 8))
        self.assertEqual(s.pairs(), [(0, 2), (8, 10)])
        s.remove(Interval(0, 2))
        self.assertEqual(s.pairs(), [(8, 10)])

    def test_contains_and_total(self):
        s = IntervalSet.from_pairs([(0, 3), (5, 7)])
        self.assertEqual([x for x in range(9) if s.contains(x)], [0, 1, 2, 5, 6])
        self.assertEqual(s.total_length(), 5)

    def test_span_and_gaps(self):
        s = IntervalSet.from_pairs([(0, 3), (5, 7), (9, 12)])
        self.assertEqual(s.span(), Interval(0, 12))
        self.assertEqual(s.gaps(), [Interval(3, 5), Interval(7, 9)])
        self.assertIsNone(IntervalSet().span())

    def test_largest(self):
        s = IntervalSet.from_pairs([(0, 2), (4, 8), (10, 12), (20, 24)])
        self.assertEqual(s.largest(), [Interval(4, 8)])
        self.assertEqual(s.largest(3), [Interval(4, 8), Interval(20, 24), Interval(0, 2)])


if __name__ == "__main__":
    unittest.main()
