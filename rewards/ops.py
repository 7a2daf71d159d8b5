"""MCP-Universe evaluator operations: ``func(output) op value``, as pure functions.

Follows MCP-Universe ``mcpuniverse/evaluator/functions.py``. ``func`` is a chain of steps joined by
``->``: ``raw`` (the output as it is), ``json`` (decode, tolerating a fenced ```json block), ``get(key)``,
``len``, ``foreach`` (fan out over a list; every element must pass), ``list`` (wrap in a list).
Ops: ``=``, ``<``, ``<=``, ``>``, ``>=``, ``in`` (output in value), ``contain`` (value in output), and
``approx`` (numeric closeness; ``op_args`` ``{"abs_tol", "rel_tol"}`` or a number; it is in the
MCP-Universe forks, not upstream). ``""`` as op passes whenever ``func`` succeeds.

Additions: the func ``number`` takes the final number of a free-text answer (``"The answer is
42."`` -> 42.0), for models that answer in prose rather than JSON.

Two kinds of failure are kept apart. An output that does not fit (not JSON, no number, a missing
key, an incomparable type) is the model's mistake: ``passed=False`` with the reason. A malformed
spec (unknown func or op, missing argument, bad tolerance) is ``EvaluatorError``: a crash of the
evaluator is never a silent 0.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import msgspec

from specs.errors import EvaluatorError
from specs.evaluator_grammar import GENERIC_OPS, FuncStep, parse_func

DEFAULT_ABS_TOL = 1e-6

_NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|(?<![\w.])-?\.\d+")
_ANSWER_IS = re.compile(r"answer\s*(?:is|:|=)\s*(?:approximately\s*|about\s*)?\$?\s*", re.IGNORECASE)


class EvalOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """The verdict of one evaluator."""

    passed: bool
    reason: str = ""


class OutputMismatch(Exception):
    """The model's output does not fit the func chain (a failed check, not a crash)."""


def final_number(text: str) -> float | None:
    """The final numeric answer in free text: after the last "answer is", else the last number."""
    matches = list(_ANSWER_IS.finditer(text))
    if matches:
        m = _NUMBER.search(text, matches[-1].end())
        if m is not None:
            return float(m.group().replace(",", ""))
    numbers = _NUMBER.findall(text)
    return float(numbers[-1].replace(",", "")) if numbers else None


def _decode_json(x: Any) -> Any:
    if not isinstance(x, str):
        raise OutputMismatch(f"json: expected text, got {type(x).__name__}")
    text = x.strip().strip("`").strip()
    if text.startswith("json"):
        text = text[4:].strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise OutputMismatch(f"output is not valid JSON ({e.msg} at char {e.pos})") from None


def _step(step: FuncStep, x: Any) -> list[Any]:
    """Apply one step to one value; a list result of ``foreach`` fans out."""
    if step.name == "raw":
        return [x]
    if step.name == "json":
        return [_decode_json(x)]
    if step.name == "get":
        if not isinstance(x, dict):
            raise OutputMismatch(f"get({step.args[0]}): expected a JSON object, got {type(x).__name__}")
        return [x.get(step.args[0])]
    if step.name == "len":
        if not isinstance(x, (list, tuple)):
            raise OutputMismatch(f"len: expected a list, got {type(x).__name__}")
        return [len(x)]
    if step.name == "foreach":
        if not isinstance(x, (list, tuple)):
            raise OutputMismatch(f"foreach: expected a list, got {type(x).__name__}")
        return list(x)
    if step.name == "list":
        return [[x]]
    if step.name == "number":
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            return [float(x)]
        n = final_number(x) if isinstance(x, str) else None
        if n is None:
            raise OutputMismatch(f"number: no number in the output {str(x)[-80:]!r}")
        return [n]
    raise EvaluatorError(f"unknown func step {step.name!r}")  # parse_func keeps this unreachable


def apply_func(func: str, output: Any) -> list[Any]:
    """Run the chain on the output; the results every op must pass (several after ``foreach``)."""
    values = [output]
    for step in parse_func(func):
        values = [y for x in values for y in _step(step, x)]
    return values


def _tolerances(op_args: Any) -> tuple[float, float]:
    if op_args is None or op_args == "":
        return DEFAULT_ABS_TOL, 0.0
    try:
        if isinstance(op_args, dict):
            abs_tol: Any = op_args.get("abs_tol", op_args.get("tolerance", DEFAULT_ABS_TOL))
            rel_tol: Any = op_args.get("rel_tol", 0.0)
            return float(abs_tol), float(rel_tol)
        return float(op_args), 0.0
    except (TypeError, ValueError):
        raise EvaluatorError(
            f"approx: op_args must be a number or {{abs_tol, rel_tol}}, got {op_args!r}"
        ) from None


def _as_float(x: Any, what: str) -> float:
    if isinstance(x, bool):
        raise OutputMismatch(f"{what} {x!r} is not a number")
    try:
        return float(x.replace(",", "") if isinstance(x, str) else x)
    except (TypeError, ValueError):
        raise OutputMismatch(f"{what} {x!r} is not a number") from None


def _approx(a: Any, b: Any, op_args: Any) -> tuple[bool, str]:
    abs_tol, rel_tol = _tolerances(op_args)
    try:
        expected = float(b)
    except (TypeError, ValueError):
        raise EvaluatorError(f"approx: value {b!r} is not a number") from None
    actual = _as_float(a, "output")
    diff = abs(actual - expected)
    if math.isfinite(diff) and (diff <= abs_tol or diff <= abs(expected) * rel_tol):
        return True, ""
    return (
        False,
        f"output {actual:g} differs from {expected:g} by {diff:g} (abs_tol={abs_tol:g}, rel_tol={rel_tol:g})",
    )


def _ordered(symbol: str, check: Callable[[Any, Any], bool]) -> Callable[[Any, Any, Any], tuple[bool, str]]:
    def op(a: Any, b: Any, _op_args: Any) -> tuple[bool, str]:
        try:
            ok = check(a, b)
        except TypeError:
            return False, f"output {a!r} cannot be compared with {b!r}"
        return (True, "") if ok else (False, f"output {a!r} is not {symbol} {b!r}")

    return op


def _in(a: Any, b: Any, _op_args: Any) -> tuple[bool, str]:
    if not isinstance(b, (str, list, tuple)):
        raise EvaluatorError(f"in: value must be a list or a string, got {type(b).__name__}")
    if isinstance(b, str) and not isinstance(a, str):
        return False, f"output {a!r} is not text, cannot be in {b!r}"
    return (True, "") if a in b else (False, f"output {a!r} is not in {b!r}")


def _contain(a: Any, b: Any, _op_args: Any) -> tuple[bool, str]:
    if not isinstance(a, (str, list, tuple)):
        return False, f"output {a!r} is not a list or text, cannot contain {b!r}"
    if isinstance(a, str) and not isinstance(b, str):
        b = str(b)  # "contain 42" on prose means the digits appear
    return (True, "") if b in a else (False, f"output does not contain {b!r}")


_OPS: dict[str, Callable[[Any, Any, Any], tuple[bool, str]]] = {
    "=": lambda a, b, _: (True, "") if a == b else (False, f"output {a!r} != expected {b!r}"),
    "<": _ordered("<", lambda a, b: a < b),
    "<=": _ordered("<=", lambda a, b: a <= b),
    ">": _ordered(">", lambda a, b: a > b),
    ">=": _ordered(">=", lambda a, b: a >= b),
    "in": _in,
    "contain": _contain,
    "approx": _approx,
}


def evaluate_op(func: str, op: str, value: Any, op_args: Any, output: Any) -> EvalOutcome:
    """Check ``func(output) op value`` for a generic op; ``EvaluatorError`` if the spec is malformed.

    Registered (domain) evaluators are not handled here; ``is_generic_op`` tells them apart.
    """
    if op not in GENERIC_OPS:
        raise EvaluatorError(
            f"op {op!r} is not a generic op ({', '.join(sorted(GENERIC_OPS - {''}))}); "
            "domain ops are registered with @evaluator"
        )
    try:
        results = apply_func(func, output)
    except OutputMismatch as e:
        return EvalOutcome(passed=False, reason=str(e))
    if not op:
        return EvalOutcome(passed=True)
    for i, result in enumerate(results):
        try:
            ok, reason = _OPS[op](result, value, op_args)
        except OutputMismatch as e:
            ok, reason = False, str(e)
        if not ok:
            where = f" (item {i})" if len(results) > 1 else ""
            return EvalOutcome(passed=False, reason=f"{func} {op}: {reason}{where}")
    return EvalOutcome(passed=True)
