"""The project's error hierarchy for specs, configs and evaluators.

Every message names the thing, the place and what was expected. ``SpecError`` carries the file and
the location inside it (``task[3].evaluators[0].op``) as attributes, so a checker can print them
and a test can assert on them; ``SpecErrors`` bundles several problems so that a check reports
every one of them at once instead of stopping at the first.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec


class MCPRLError(Exception):
    """Base class of every error this project raises on purpose."""


class SpecError(MCPRLError):
    """A malformed task file, server list, hook reference or run config, refused at load."""

    def __init__(self, file: str, where: str, message: str) -> None:
        self.file = file
        self.where = where
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.file}: {self.where}: {self.message}"

    def __reduce__(self) -> tuple[Any, ...]:  # Ray ships errors between processes: keep the fields
        return (type(self), (self.file, self.where, self.message))


class SpecErrors(SpecError):
    """Several spec problems found in one pass; ``problems`` holds each of them."""

    def __init__(self, problems: Sequence[SpecError]) -> None:
        if not problems:
            raise ValueError("SpecErrors needs at least one problem")
        self.problems: tuple[SpecError, ...] = tuple(problems)
        first = self.problems[0]
        super().__init__(first.file, first.where, first.message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.problems,))

    def __str__(self) -> str:
        if len(self.problems) == 1:
            return str(self.problems[0])
        lines = [f"{len(self.problems)} problems:"]
        lines.extend(f"  {p}" for p in self.problems)
        return "\n".join(lines)


class EvaluatorError(MCPRLError):
    """An evaluator spec that cannot run (unknown func/op, bad arguments, wrong input type).

    Raised instead of returning ``passed=False``: a crashed evaluator is not a wrong answer, and
    the trajectory it was judging must be dropped, never scored 0.0.
    """


def raise_all(problems: Sequence[SpecError]) -> None:
    """Raise nothing, the only problem, or a ``SpecErrors`` holding all of them."""
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise SpecErrors(problems)


def split_validation_error(error: msgspec.ValidationError, prefix: str) -> tuple[str, str]:
    """``(where, message)`` from a msgspec error: ``"Expected `int`, got `str` - at `$.a[0].b`"``
    with prefix ``task[3]`` gives ``("task[3].a[0].b", "Expected `int`, got `str`")``."""
    message, _, at = str(error).partition(" - at `$")
    path = at.rstrip("`")
    if prefix:
        return f"{prefix}{path}", message
    return path.lstrip(".") or "top level", message


def read_json_file(path: str | os.PathLike[str]) -> Any:
    """Decode a JSON spec file; a missing file or invalid JSON is a ``SpecError`` naming the place."""
    file = str(path)
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(file, "file", "no such file") from None
    except json.JSONDecodeError as e:
        raise SpecError(file, f"line {e.lineno} column {e.colno}", f"invalid JSON: {e.msg}") from None
