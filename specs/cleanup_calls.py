"""The per-tool-call cleanups a finished episode owes, in MCP-Universe's order and argument syntax.

A task's ``cleanups`` entry with ``tool`` set (``{"server": "shop", "tool": "place_order",
"cleanup_func": "cancel_order", "cleanup_args": {"order_id": "$return -> get(structuredContent) -> get(order_id)"}}``)
undoes what each call of ``server``'s ``tool`` changed outside the environment. As in MCP-Universe
(``Task.reset``): the episode's calls are visited newest first; every cleanup matching a call runs
once for it. A ``cleanup_args`` string ``$name -> op -> ...`` reads the call's argument ``name``
(``$return``: the call's result in MCP's shape, ``ToolCallRecord.returned``: ``{"content": [{"type":
"text", "text": ...}], "structuredContent": ..., "isError": ...}``) and applies the chain:
``get(key)``, ``array(i)``, ``json`` (parse a text: ``$return -> get(content) -> array(0) -> get(text)
-> json``); any other value is passed as it is. Only calls that succeeded are undone
(a failed call changed nothing). ``cleanup_func`` is run by the pipeline (``actors.rollout``): a
registered cleanup hook with these keyword arguments, else the tool of that name on ``server``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import msgspec

from specs.errors import SpecError
from specs.task import CleanupSpec, TaskSpec
from specs.trajectory import ToolCallRecord

_OP = re.compile(r"^\s*([a-zA-Z_]+)\s*(?:\((.*)\))?\s*$")


class CleanupCall(msgspec.Struct, frozen=True, kw_only=True):
    """One cleanup to run: the spec and its arguments, filled from one tool call."""

    spec: CleanupSpec
    arguments: Any
    call_turn: int
    """The model turn of the call it undoes."""


def cleanup_calls(task: TaskSpec, calls: Sequence[ToolCallRecord]) -> list[CleanupCall]:
    """The tool-bound cleanups of ``task`` for ``calls``, newest call first; ``SpecError`` naming
    the task, the cleanup and the argument when an argument path does not fit the call."""
    bound = [(i, c) for i, c in enumerate(task.cleanups) if c.tool]
    out: list[CleanupCall] = []
    for call in reversed(calls):
        if not call.ok:
            continue
        for index, spec in bound:
            if call.server == spec.server and call.tool == spec.tool:
                where = f"task {task.instance_id}", f"cleanups[{index}].cleanup_args"
                try:
                    arguments = fill_args(spec.cleanup_args, call)
                except (KeyError, IndexError, TypeError, ValueError) as e:
                    raise SpecError(*where, f"does not fit the call of turn {call.turn}: {e}") from None
                out.append(CleanupCall(spec=spec, arguments=arguments, call_turn=call.turn))
    return out


def fill_args(value: Any, call: ToolCallRecord) -> Any:
    """``value`` with each ``$source -> op -> ...`` string read from ``call``."""
    if isinstance(value, dict):
        return {k: fill_args(v, call) for k, v in value.items()}
    if isinstance(value, list):
        return [fill_args(v, call) for v in value]
    if not isinstance(value, str) or not value.strip().startswith("$"):
        return value
    source, *ops = [part.strip() for part in value.strip()[1:].split("->")]
    if source == "return":
        current: Any = call.returned
    elif source in call.arguments:
        current = call.arguments[source]
    else:
        raise KeyError(
            f"${source}: the call has no argument {source!r} (arguments: {sorted(call.arguments)})"
        )
    for op in ops:
        match = _OP.match(op)
        name, arg = (match.group(1).lower(), (match.group(2) or "").strip()) if match else (op, "")
        if name == "get":
            current = current[arg]
        elif name == "array":
            current = current[int(arg)]
        elif name == "json":
            current = json.loads(current)
        else:
            raise ValueError(f"unknown operation {op!r}; expected get(key), array(i) or json")
    return current
