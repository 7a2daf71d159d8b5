import unittest

from csvlite import convert_value, dumps, parse, parse_line


class ParserTest(unittest.TestCase):
    def test_simple_line(self):
        self.assertEqual(parse_line("a,b,c"), ["a", "b", "c"])

    def test_quoted_delimiter(self):
        self.assertEqual(parse_line('x,"y,z"'), ["x", "y,z"])

    def test_records_with_header(self):
        self.assertEqual(parse("name,age\nada,36\n"), [{"name": "ada", "age": "36"}])


class WriterTest(unittest.TestCase):
    def test_dumps_round_trip(self):
        rows = [{"a": "1", "b": "x y"}]
        self.assertEqual(parse(dumps(rows)), rows)


class ConvertTest(unittest.TestCase):
    def test_numbers(self):
        self.assertEqual(convert_value("42"), 42)
        self.assertEqual(convert_value("2.5"), 2.5)


if __name__ == "__main__":
    unittest.main()
