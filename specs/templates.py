"""``{{VAR}}`` templates: the one syntax of server lists and task files (MCP-Universe renders both
with Jinja; only plain variables are supported here, ``{{ VAR }}`` spacing included).

A server list keeps its templates until launch (``specs.servers``: values there may be secrets).
A task file's templates are filled when it is loaded (``specs.task.load_tasks``): every string of
a task, at any depth (instruction, evaluator values and ``op_args``, prepare and cleanup arguments,
private fields), from the variables given (a run config's ``domain.task_vars``), then the process
environment. Task values are not secret: they reach prompts and logs. A secret an evaluator needs
(a judge's API key) is named by its environment variable instead, and read where it is used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

TEMPLATE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def walk(value: Any, where: str, on_string: Callable[[str, str], str]) -> Any:
    """A copy of ``value`` with every string ``s`` at path ``where`` replaced by ``on_string(s, where)``;
    dict keys are kept as they are."""
    if isinstance(value, str):
        return on_string(value, where)
    if isinstance(value, list):
        return [walk(v, f"{where}[{i}]", on_string) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: walk(v, f"{where}.{k}" if where else str(k), on_string) for k, v in value.items()}
    return value


def environment(given: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a task file is filled from: ``given`` (a config's ``domain.task_vars``) over
    the process environment."""
    return {**os.environ, **(given or {})}


def fill(text: str, variables: Mapping[str, str]) -> tuple[str, list[str]]:
    """``text`` with each ``{{VAR}}`` set in ``variables`` filled; also the names that are unset or
    empty (MCP-Universe treats an empty variable as unset), left in place."""
    missing: list[str] = []

    def sub(match: re.Match[str]) -> str:
        value = variables.get(match.group(1), "")
        if not value:
            missing.append(match.group(1))
            return match.group(0)
        return value

    return TEMPLATE.sub(sub, text), missing


class StandIns(dict[str, str]):
    """Variables to check a task file with before its values are known (``python -m specs.check``):
    a variable that is not set reads as the stand-in ``<NAME>`` and is noted in ``missing``."""

    def __init__(self, given: Mapping[str, str]) -> None:
        super().__init__(given)
        self.missing: set[str] = set()

    def get(self, key: str, default: str | None = None) -> str:  # type: ignore[override]
        value = super().get(key)
        if value:
            return value
        self.missing.add(key)
        return f"<{key}>"
