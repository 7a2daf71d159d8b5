"""Parse CSV text: quoted fields, doubled quotes, a header row, blank and comment lines."""

from __future__ import annotations


class ParseError(ValueError):
    """A line that is not valid CSV; ``line`` is 1-based."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


def parse_line(text: str, delimiter: str = ",", quote: str = '"', line: int = 1) -> list[str]:
    """The fields of one line. A quoted field may hold the delimiter; ``""`` inside it is one quote."""
    fields: list[str] = []
    current: list[str] = []
    in_quotes = False
    i = 0
    while i < len(text):
        char = text[i]
        if in_quotes:
            if char == quote:
                if i + 1 < len(text) and text[i + 1] == quote:
                    current.append(quote)
                    i += 2
                    continue
                in_quotes = False
            else:
                current.append(char)
        elif char == quote:
            in_quotes = True
        elif char == delimiter:
            fields.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    if in_quotes:
        raise ParseError("unterminated quoted field", line)
    fields.append("".join(current))
    return fields


def _content_lines(text: str, comment: str) -> list[tuple[int, str]]:
    lines = []
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped:
            continue
        if comment and stripped.startswith(comment):
            continue
        lines.append((number, raw))
    return lines


def parse(
    text: str,
    delimiter: str = ",",
    header: bool = True,
    comment: str = "#",
    strip: bool = True,
) -> list[dict[str, str]] | list[list[str]]:
    """Rows of ``text``: dicts keyed by the header's names (``header=True``), else lists.

    Fields are stripped of surrounding spaces when ``strip``; a row with a different number of
    fields than the header raises ``ParseError`` naming its line.
    """
    lines = _content_lines(text, comment)
    rows: list[list[str]] = []
    for number, raw in lines:
        fields = parse_line(raw, delimiter, line=number)
        if strip:
            fields = [field.strip() for field in fields]
        rows.append(fields)
    if not header:
        return rows
    if not rows:
        return []
    names = rows[0]
    if len(set(names)) != len(names):
        raise ParseError(f"duplicate column names in header {names}", lines[0][0])
    records: list[dict[str, str]] = []
    for (number, _), fields in zip(lines[1:], rows[1:], strict=False):
        if len(fields) != len(names):
            raise ParseError(f"expected {len(names)} fields, got {len(fields)}", number)
        records.append(dict(zip(names, fields, strict=False)))
    return records
