import unittest

from csvlite import column, convert_value, dumps, format_field, infer_types, parse, parse_line
from csvlite.convert import summarize
from csvlite.parser import ParseError


class CheckParseLine(unittest.TestCase):
    def test_fields(self):
        self.assertEqual(parse_line("a,b,c"), ["a", "b", "c"])
        self.assertEqual(parse_line("a,,c,"), ["a", "", "c", ""])
        self.assertEqual(parse_line(""), [""])

    def test_quotes(self):
        self.assertEqual(parse_line('"a,b",c'), ["a,b", "c"])
        self.assertEqual(parse_line('"say ""hi""",x'), ['say "hi"', "x"])
        self.assertEqual(parse_line('""'), [""])

    def test_other_delimiter(self):
        self.assertEqual(parse_line("a;b,c;d", delimiter=";"), ["a", "b,c", "d"])

    def test_unterminated_quote(self):
        with self.assertRaises(ParseError) as caught:
            parse_line('a,"b', line=7)
        self.assertEqual(caught.exception.line, 7)


class CheckParse(unittest.TestCase):
    def test_header_records(self):
        text = "name,age\nada,36\nbob,41\n"
        self.assertEqual(parse(text), [{"name": "ada", "age": "36"}, {"name": "bob", "age": "41"}])

    def test_blank_and_comment_lines(self):
        text = "# people\nname,age\n\n  \nada,36\n# end\n"
        self.assertEqual(parse(text), [{"name": "ada", "age": "36"}])

    def test_no_header(self):
        self.assertEqual(parse("1,2\n3,4\n", header=False), [["1", "2"], ["3", "4"]])

    def test_strip(self):
        self.assertEqual(parse("a , b\n 1 ,2 \n"), [{"a": "1", "b": "2"}])
        self.assertEqual(parse("a,b\n 1 ,2\n", strip=False), [{"a": " 1 ", "b": "2"}])

    def test_wrong_field_count_names_line(self):
        with self.assertRaises(ParseError) as caught:
            parse("a,b\n1,2\n\n3\n")
        self.assertEqual(caught.exception.line, 4)

    def test_duplicate_header(self):
        with self.assertRaises(ParseError):
            parse("a,a\n1,2\n")

    def test_empty_text(self):
        self.assertEqual(parse(""), [])
        self.assertEqual(parse("a,b\n"), [])


class CheckWriter(unittest.TestCase):
    def test_format_field(self):
        self.assertEqual(format_field(None), "")
        self.assertEqual(format_field(True), "true")
        self.assertEqual(format_field(False), "false")
        self.assertEqual(format_field(3.0), "3")
        self.assertEqual(format_field(2.5), "2.5")
        self.assertEqual(format_field("a,b"), '"a,b"')
        self.assertEqual(format_field('say "hi"'), '"say ""hi"""')
        self.assertEqual(format_field(" pad"), '" pad"')
        self.assertEqual(format_field("plain"), "plain")

    def test_dumps(self):
        rows = [{"a": 1, "b": "x,y"}, {"a": 2}]
        self.assertEqual(dumps(rows), 'a,b\n1,"x,y"\n2,\n')
        self.assertEqual(dumps(rows, columns=["b"]), 'b\n"x,y"\n\n')
        self.assertEqual(dumps([]), "\n")

    def test_round_trip(self):
        rows = [{"k": 'q"uote', "v": "a, b"}]
        self.assertEqual(parse(dumps(rows), strip=False), rows)


class CheckConvert(unittest.TestCase):
    def test_convert_value(self):
        self.assertEqual(convert_value("42"), 42)
        self.assertEqual(convert_value("-7"), -7)
        self.assertEqual(convert_value("2.5"), 2.5)
        self.assertIs(convert_value("Yes"), True)
        self.assertIs(convert_value("false"), False)
        self.assertEqual(convert_value("hello"), "hello")
        self.assertIsNone(convert_value(""))
        self.assertEqual(convert_value("", empty=0), 0)

    def test_infer_and_column(self):
        records = infer_types([{"n": "1", "x": ""}, {"n": "2.5", "x": "no"}])
        self.assertEqual(records, [{"n": 1, "x": None}, {"n": 2.5, "x": False}])
        self.assertEqual(column(records, "x"), [False])
        self.assertEqual(column(records, "x", skip_missing=False), [None, False])
        self.assertEqual(column(records, "n"), [1, 2.5])

    def test_summarize(self):
        records = [{"v": 4}, {"v": "n/a"}, {"v": 10}, {"v": True}, {}]
        self.assertEqual(summarize(records, "v"), {"count": 2, "min": 4, "max": 10, "mean": 7.0})
        self.assertEqual(summarize([{"v": 3}], "v")["count"], 1)
        with self.assertRaises(ValueError):
            summarize([{"v": "x"}], "v")


if __name__ == "__main__":
    unittest.main()
