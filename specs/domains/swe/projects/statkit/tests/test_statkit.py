import unittest

from statkit import mean, median, moving_average, percentile, variance


class DescribeTest(unittest.TestCase):
    def test_mean_and_median(self):
        self.assertEqual(mean([1, 2, 3, 6]), 3)
        self.assertEqual(median([5, 1, 3]), 3)

    def test_variance(self):
        self.assertAlmostEqual(variance([2, 4, 4, 4, 5, 5, 7, 9], sample=False), 4.0)

    def test_percentile_ends(self):
        self.assertEqual(percentile([3, 1, 2], 0), 1)
        self.assertEqual(percentile([3, 1, 2], 100), 3)


class SeriesTest(unittest.TestCase):
    def test_moving_average(self):
        self.assertEqual(moving_average([1, 2, 3, 4], 2), [1.5, 2.5, 3.5])


if __name__ == "__main__":
    unittest.main()
