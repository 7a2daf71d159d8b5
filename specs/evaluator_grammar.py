"""The grammar of MCP-Universe evaluator specs: the ``func`` chain steps and the generic ops.

A task's evaluator is ``func(output) op value``; this module knows which names the format allows
and parses a ``func`` chain (``"json -> get(city)"``) into steps, so a spec can be checked before
any run (``specs.check``). What each step and op *does* is ``rewards.ops``.
"""

from __future__ import annotations

import re

import msgspec

from specs.errors import EvaluatorError

FUNCS: frozenset[str] = frozenset({"raw", "json", "get", "len", "foreach", "list", "number"})
GENERIC_OPS: frozenset[str] = frozenset({"", "=", "<", "<=", ">", ">=", "in", "contain", "approx"})


class FuncStep(msgspec.Struct, frozen=True):
    name: str
    args: tuple[str, ...] = ()


def parse_func(func: str) -> list[FuncStep]:
    """Parse ``"json -> get(city)"``; ``EvaluatorError`` on unknown steps or missing arguments."""
    steps: list[FuncStep] = []
    for item in (p.strip() for p in func.split("->")):
        if not item:
            continue
        m = re.fullmatch(r"([A-Za-z_]\w*)\s*(?:\((.*)\))?", item)
        if m is None:
            raise EvaluatorError(f"func {func!r}: cannot parse step {item!r}; expected name or name(args)")
        name, raw_args = m.group(1), m.group(2)
        if name not in FUNCS:
            raise EvaluatorError(f"func {func!r}: unknown step {name!r}; known: {', '.join(sorted(FUNCS))}")
        args = tuple(a.strip() for a in raw_args.split(",")) if raw_args else ()
        if name == "get" and (len(args) != 1 or not args[0]):
            raise EvaluatorError(f"func {func!r}: get needs exactly one key, as get(key)")
        steps.append(FuncStep(name, args))
    if not steps:
        raise EvaluatorError(f"func {func!r}: empty chain; use 'raw' for the output as it is")
    return steps


def is_generic_op(op: str) -> bool:
    return op in GENERIC_OPS
