"""A small CSV reader and writer with type inference."""

from csvlite.convert import column, convert_value, infer_types
from csvlite.parser import parse, parse_line
from csvlite.writer import dumps, format_field

__all__ = ["column", "convert_value", "dumps", "format_field", "infer_types", "parse", "parse_line"]
