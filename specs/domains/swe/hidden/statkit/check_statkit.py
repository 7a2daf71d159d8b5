import unittest

from statkit import (
    correlation,
    histogram,
    mean,
    median,
    mode,
    moving_average,
    percentile,
    stdev,
    variance,
    zscores,
)


class CheckDescribe(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([4]), 4)
        self.assertEqual(mean([1, 2, 3, 6]), 3)
        with self.assertRaises(ValueError):
            mean([])

    def test_median(self):
        self.assertEqual(median([7]), 7)
        self.assertEqual(median([5, 1, 3]), 3)
        self.assertEqual(median([4, 1, 3, 2]), 2.5)
        with self.assertRaises(ValueError):
            median([])

    def test_mode(self):
        self.assertEqual(mode([3, 1, 3, 2]), 3)
        self.assertEqual(mode([2, 5, 5, 2, 9]), 2)
        self.assertEqual(mode([8]), 8)

    def test_variance(self):
        data = [2, 4, 4, 4, 5, 5, 7, 9]
        self.assertAlmostEqual(variance(data, sample=False), 4.0)
        self.assertAlmostEqual(variance(data), 32 / 7)
        self.assertAlmostEqual(variance([1, 3]), 2.0)
        self.assertEqual(variance([5], sample=False), 0)
        with self.assertRaises(ValueError):
            variance([5])

    def test_stdev(self):
        self.assertAlmostEqual(stdev([2, 4, 4, 4, 5, 5, 7, 9], sample=False), 2.0)
        self.assertAlmostEqual(stdev([1, 3]), 2**0.5)

    def test_percentile(self):
        data = [15, 20, 35, 40, 50]
        self.assertEqual(percentile(data, 0), 15)
        self.assertEqual(percentile(data, 100), 50)
        self.assertEqual(percentile(data, 50), 35)
        self.assertAlmostEqual(percentile(data, 40), 29.0)
        self.assertAlmostEqual(percentile([1, 2], 25), 1.25)
        self.assertEqual(percentile([9], 70), 9)
        for bad in (-1, 101):
            with self.assertRaises(ValueError):
                percentile(data, bad)


class CheckSeries(unittest.TestCase):
    def test_moving_average(self):
        self.assertEqual(moving_average([1, 2, 3, 4, 5]), [2, 3, 4])
        self.assertEqual(moving_average([1, 2, 3, 4], 2), [1.5, 2.5, 3.5])
        self.assertEqual(moving_average([1, 2], 1), [1, 2])
        self.assertEqual(moving_average([1, 2, 3], 3), [2])
        self.assertEqual(moving_average([1, 2], 3), [])
        with self.assertRaises(ValueError):
            moving_average([1, 2], 0)

    def test_zscores(self):
        self.assertEqual(zscores([5, 5, 5]), [0.0, 0.0, 0.0])
        z = zscores([1, 2, 3])
        self.assertEqual([round(v, 6) for v in z], [-1.0, 0.0, 1.0])

    def test_histogram(self):
        self.assertEqual(histogram([0, 1, 2, 3, 4, 5, 6, 7, 8]), [2, 2, 2, 3])
        self.assertEqual(histogram([1, 1, 1], bins=3), [3, 0, 0])
        self.assertEqual(histogram([], bins=2), [0, 0])
        self.assertEqual(histogram([0, 10], bins=2), [1, 1])
        self.assertEqual(histogram([0, 4, 5, 10], bins=1), [4])
        with self.assertRaises(ValueError):
            histogram([1], bins=0)

    def test_correlation(self):
        self.assertAlmostEqual(correlation([1, 2, 3], [2, 4, 6]), 1.0)
        self.assertAlmostEqual(correlation([1, 2, 3], [3, 2, 1]), -1.0)
        self.assertAlmostEqual(correlation([1, 2, 3, 4], [1, 3, 2, 4]), 0.8)
        with self.assertRaises(ValueError):
            correlation([1, 2], [1, 2, 3])
        with self.assertRaises(ValueError):
            correlation([1], [1])
        with self.assertRaises(ValueError):
            correlation([1, 1], [2, 3])


if __name__ == "__main__":
    unittest.main()
