"""Write rows as CSV text, quoting only the fields that need it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def format_field(value: Any, delimiter: str = ",", quote: str = '"') -> str:
    """``value`` as one CSV field: ``None`` is empty; quoted when it holds the delimiter, a quote,
    a newline, or leading/trailing spaces."""
    if value is None:
        return ""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float) and value.is_integer():
        text = str(int(value))
    else:
        text = str(value)
    needs_quotes = delimiter in text or quote in text or "\n" in text or text != text.strip()
    if needs_quotes:
        return quote + text.replace(quote, quote * 2) + quote
    return text


def format_row(values: Sequence[Any], delimiter: str = ",") -> str:
    return delimiter.join(format_field(v, delimiter) for v in values)


def dumps(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None, delimiter: str = ",") -> str:
    """CSV text with a header line: ``columns`` (default: the keys of the first row, in order).
    A missing key is an empty field. Every line ends with a newline."""
    if columns is None:
        columns = list(rows[0]) if rows else []
    lines = [format_row(columns, delimiter)]
    for row in rows:
        lines.append(format_row([row.get(name) for name in columns], delimiter))
    return "\n".join(lines) + "\n"
