"""Seeded AST mutations of a Python source file: the bugs the swe domain's tasks plant.

``sites(source, file)`` lists every candidate ``Mutation`` of a file, in source order, for each
kind below; ``Mutation.apply(source)`` gives the mutated file. The AST finds the sites, the edit
is made on the text (one node's source segment, or whole lines for ``missing_case``), so the rest
of the file keeps its formatting and the task records the exact lines:

- ``off_by_one_compare``: ``<`` <-> ``<=``, ``>`` <-> ``>=`` (one operator of a comparison);
- ``off_by_one_constant``: an integer literal ``n`` -> ``n + 1`` or ``n - 1``;
- ``off_by_one_index``: a slice bound or a subscript index ``e`` -> ``e + 1`` / ``e - 1``;
- ``wrong_operator``: ``+`` <-> ``-``, ``*`` -> ``+``, ``/`` <-> ``//``, ``%`` -> ``//``,
  ``and`` <-> ``or``, ``==`` <-> ``!=``, ``in`` <-> ``not in``;
- ``missing_case``: an ``if`` without ``else`` whose body ends in ``return`` / ``raise`` /
  ``continue`` / ``break`` is deleted (never the last statement of its block);
- ``wrong_default``: a parameter's default ``int`` ``n`` -> ``n + 1`` (``0`` -> ``1``), a ``bool``
  default flipped;
- ``swapped_arguments``: the first two positional arguments of a call swapped;
- ``negated_condition``: an ``if`` / ``while`` test ``t`` -> ``not (t)`` (``not t`` -> ``t``).

Docstrings, f-strings and ``__repr__`` are left alone. Which sites become tasks (those that make a
hidden test fail) is decided by ``generate.py``, which runs the tests.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

KINDS: tuple[str, ...] = (
    "off_by_one_compare",
    "off_by_one_constant",
    "off_by_one_index",
    "wrong_operator",
    "missing_case",
    "wrong_default",
    "swapped_arguments",
    "negated_condition",
)

_COMPARE_SWAP: dict[type[ast.cmpop], tuple[str, str]] = {
    ast.Lt: ("<", "<="),
    ast.LtE: ("<=", "<"),
    ast.Gt: (">", ">="),
    ast.GtE: (">=", ">"),
}
_COMPARE_WRONG: dict[type[ast.cmpop], tuple[str, str]] = {
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
    ast.In: ("in", "not in"),
    ast.NotIn: ("not in", "in"),
}
_BINOP_WRONG: dict[type[ast.operator], tuple[str, str]] = {
    ast.Add: ("+", "-"),
    ast.Sub: ("-", "+"),
    ast.Mult: ("*", "+"),
    ast.Div: ("/", "//"),
    ast.FloorDiv: ("//", "/"),
    ast.Mod: ("%", "//"),
}
_ENDS_CASE = (ast.Return, ast.Raise, ast.Continue, ast.Break)


@dataclass(frozen=True)
class Mutation:
    """One planted bug: lines ``line .. line + len(original lines) - 1`` of ``file`` (1-based)
    read ``original`` in the pristine project and ``mutated`` after the mutation (both whole
    lines, each ending in a newline)."""

    kind: str
    file: str
    line: int
    original: str
    mutated: str
    detail: str

    def apply(self, source: str) -> str:
        lines = source.splitlines(keepends=True)
        start = self.line - 1
        count = len(self.original.splitlines())
        if "".join(lines[start : start + count]) != self.original:
            raise ValueError(f"{self.file}:{self.line}: the source does not read {self.original!r} there")
        return "".join(lines[:start]) + self.mutated + "".join(lines[start + count :])

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "file": self.file,
            "line": self.line,
            "original": self.original,
            "mutated": self.mutated,
            "detail": self.detail,
        }


class _Sites(ast.NodeVisitor):
    def __init__(self, source: str, file: str) -> None:
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.file = file
        self.found: list[Mutation] = []
        self._skip: set[int] = set()  # ids of nodes not to mutate (defaults, slices, f-strings)

    # -- helpers ---------------------------------------------------------------------------------

    def _segment(self, node: ast.AST, new: str, kind: str, detail: str) -> None:
        """Replace ``node``'s source text (on one line) by ``new``."""
        lineno, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if lineno is None or lineno != end:
            return
        text = self.lines[lineno - 1]
        mutated = text[: node.col_offset] + new + text[node.end_col_offset :]  # type: ignore[attr-defined]
        if mutated != text:
            self.found.append(Mutation(kind, self.file, lineno, text, mutated, detail))

    def _between(self, left: ast.AST, right: ast.AST, old: str, new: str, kind: str) -> None:
        """Replace the operator ``old`` between two operands on one line by ``new``."""
        line = getattr(left, "end_lineno", None)
        if line is None or line != getattr(right, "lineno", None):
            return
        text = self.lines[line - 1]
        a, b = left.end_col_offset, right.col_offset  # type: ignore[attr-defined]
        gap = text[a:b]
        pad = f" {old} "
        if pad in gap:
            replaced = gap.replace(pad, f" {new} ", 1)
        elif not old.isalpha() and gap.count(old) == 1:
            replaced = gap.replace(old, new, 1)
        else:
            return
        mutated = text[:a] + replaced + text[b:]
        self.found.append(Mutation(kind, self.file, line, text, mutated, f"`{old}` -> `{new}`"))

    # -- visitors --------------------------------------------------------------------------------

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name == "__repr__":
            return
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            self._skip.add(id(body[0].value))  # the docstring
        args = node.args
        for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
            self._skip.add(id(default))
            if isinstance(default, ast.Constant) and type(default.value) is bool:
                self._segment(default, str(not default.value), "wrong_default", "default flipped")
            elif isinstance(default, ast.Constant) and type(default.value) is int:
                self._segment(default, str(default.value + 1), "wrong_default", "default + 1")
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            self._skip.add(id(body[0].value))
        self.generic_visit(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        return  # messages: nothing inside an f-string is mutated

    def visit_Compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            if type(op) in _COMPARE_SWAP:
                old, new = _COMPARE_SWAP[type(op)]
                self._between(operands[i], operands[i + 1], old, new, "off_by_one_compare")
            elif type(op) in _COMPARE_WRONG:
                old, new = _COMPARE_WRONG[type(op)]
                self._between(operands[i], operands[i + 1], old, new, "wrong_operator")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if type(node.op) in _BINOP_WRONG:
            old, new = _BINOP_WRONG[type(node.op)]
            self._between(node.left, node.right, old, new, "wrong_operator")
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        for left, right in zip(node.values, node.values[1:], strict=False):
            self._between(left, right, old, new, "wrong_operator")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if id(node) in self._skip or type(node.value) is not int:
            return
        n = node.value
        self._segment(node, str(n + 1), "off_by_one_constant", f"{n} -> {n + 1}")
        if n > 0:
            self._segment(node, str(n - 1), "off_by_one_constant", f"{n} -> {n - 1}")

    def _bound(self, node: ast.expr) -> None:
        self._skip.add(id(node))
        text = ast.get_source_segment(self.source, node)
        if text is None:
            return
        if isinstance(node, ast.Constant) and type(node.value) is int:
            forms = [str(node.value + 1), *([str(node.value - 1)] if node.value > 0 else [])]
        else:
            forms = [f"{text} + 1", f"{text} - 1"]
        for form in forms:
            self._segment(node, form, "off_by_one_index", f"`{text}` -> `{form}`")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        index = node.slice
        if isinstance(index, ast.Slice):
            for bound in (index.lower, index.upper):
                if bound is not None:
                    self._bound(bound)
        elif not isinstance(index, ast.Tuple) and not isinstance(index, ast.Constant | ast.Name):
            self._bound(index)
        elif isinstance(index, ast.Constant) and type(index.value) is int:
            self._bound(index)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        positional = node.args
        if len(positional) >= 2 and not any(isinstance(a, ast.Starred) for a in positional[:2]):
            a, b = positional[0], positional[1]
            ta, tb = ast.get_source_segment(self.source, a), ast.get_source_segment(self.source, b)
            if ta and tb and ta != tb and a.lineno == b.end_lineno:
                text = self.lines[a.lineno - 1]
                mutated = text[: a.col_offset] + tb + text[a.end_col_offset : b.col_offset] + ta
                mutated += text[b.end_col_offset :]
                detail = f"arguments `{ta}` and `{tb}` swapped"
                self.found.append(Mutation("swapped_arguments", self.file, a.lineno, text, mutated, detail))
        self.generic_visit(node)

    def _negate(self, test: ast.expr) -> None:
        text = ast.get_source_segment(self.source, test)
        if text is None:
            return
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = ast.get_source_segment(self.source, test.operand)
            new = inner if inner is not None else text
        else:
            new = f"not ({text})"
        self._segment(test, new, "negated_condition", f"`{text}` -> `{new}`")

    def visit_If(self, node: ast.If) -> None:
        self._negate(node.test)
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self._negate(node.test)
        self.generic_visit(node)

    def blocks(self, tree: ast.Module) -> None:
        """``missing_case`` sites: removable early-exit ``if`` blocks, with the next line as context."""
        for parent in ast.walk(tree):
            for field in ("body", "orelse"):
                block = getattr(parent, field, None)
                if not isinstance(block, list):
                    continue
                for stmt, following in zip(block, block[1:], strict=False):
                    if (
                        not isinstance(stmt, ast.If)
                        or stmt.orelse
                        or not isinstance(stmt.body[-1], _ENDS_CASE)
                    ):
                        continue
                    start, end = stmt.lineno, stmt.end_lineno or stmt.lineno
                    context = self.lines[following.lineno - 1]
                    original = "".join(self.lines[start - 1 : following.lineno])
                    if "".join(self.lines[end : following.lineno - 1]).strip():
                        continue  # something other than blank lines between the block and the next statement
                    condition = ast.get_source_segment(self.source, stmt.test)
                    detail = f"the `if {condition}:` case removed"
                    self.found.append(Mutation("missing_case", self.file, start, original, context, detail))


def sites(source: str, file: str) -> list[Mutation]:
    """Every candidate mutation of ``source`` (the text of ``file``), in a stable order."""
    tree = ast.parse(source)
    visitor = _Sites(source, file)
    visitor.visit(tree)
    visitor.blocks(tree)
    seen: set[tuple[int, str]] = set()
    unique: list[Mutation] = []
    for mutation in visitor.found:
        key = (mutation.line, mutation.mutated)
        if key in seen:
            continue
        seen.add(key)
        try:
            ast.parse(mutation.apply(source))
        except SyntaxError:
            continue
        unique.append(mutation)
    return unique
