"""Task specifications in the MCP-Universe task format, validated at load.

A task file holds one task object or a list of them (MCP-Universe ``TaskConfig``, plus the fields its
RL-training files add: ``instance_id``, ``instruction``, ``dockerfile_path``)::

    {"instance_id": "calc-0001", "category": "arithmetic",
     "instruction": "A shop has 17 boxes of 25 pens; 38 are sold. How many pens are left?",
     "output_format": "...", "mcp_servers": [{"name": "calculator"}],
     "evaluators": [{"func": "number", "op": "approx", "value": 387}],
     "prepares": [{"prepare_func": "write_instruction", "prepare_args": {"path": "task.txt"}}],
     "_answer": 387}

``question`` is accepted as an alias of ``instruction`` (MCP-Universe benchmark files use it).
Templates ``{{VAR}}`` in any string of a task are filled at load (``specs.templates``): from the
run config's ``domain.task_vars``, then the process environment; an unset one is refused naming
the task, the field and the variable.
Every task must give its prompt (``instruction`` or ``question``), its ``mcp_servers`` and its
``evaluators``, the lists non-empty: MCP-Universe defaults them to empty, but a task without servers
has no tool to use and one without evaluators would succeed without a check; a task lacking one is
refused naming the file, ``task[index]`` and the field. Fields starting with ``_`` are private:
kept in ``TaskSpec.private``, ignored by the framework (a scripted expert may read them). Any other
unknown field is refused with the file, the task index, the field and the accepted fields. Every
problem in a file is reported, not only the first.

``reference_calls`` (optional, an addition to the MCP-Universe format) lists the tool calls a correct
trajectory makes, for the tool reward (``rewards.tool_reward``, MCPDisCo Eq. 5-8)::

    "reference_calls": [
      {"server": "calculator", "tool": "multiply", "arguments": {"a": 17, "b": 25}},
      {"server": "calculator", "tool": "subtract", "arguments": {"a": 425, "b": 38, "note": "x"},
       "required": ["a", "b"]}
    ]

``server`` is the server's name in the registry and ``tool`` the tool's own name (the model calls it
as ``<server>__<tool>``); ``arguments`` are the exact reference values; ``required`` names the keys a
call must give (default: every key of ``arguments``; ``[]``: none). Checked at load: non-empty
server and tool, each required key among the arguments and listed once, and the server (and tool)
among the task's ``mcp_servers`` (and that server's ``tools``) when the task lists them. A task
without ``reference_calls`` is scored by the format term of the tool reward only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from specs.errors import SpecError, raise_all, read_json_file, split_validation_error
from specs.templates import environment, fill, walk


class McpServerRef(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A server the task uses, by its name in the server registry."""

    name: str
    tools: tuple[str, ...] | None = None
    """Only these tools of the server are shown to the model; ``None`` shows all."""


class EvaluatorSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """MCP-Universe ``EvaluatorConfig``: checks ``func(output) op value``.

    ``func`` is a chain like ``"json -> get(answer)"``; ``op`` a generic comparison (``=``, ``approx``,
    ``contain``...) or the name of a registered evaluator (``calculator.final_answer``); ``""`` only
    requires that ``func`` succeeds.
    """

    func: str
    op: str = ""
    value: Any = None
    """The expected operand of a generic op (the ground truth)."""
    op_args: Any = None
    """Extra arguments: tolerances of generic ops, or keyword arguments of a registered evaluator."""
    desc: str = ""
    """Human description, for reports."""


class PrepareSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """MCP-Universe ``TaskPrepareConfig``: a registered prepare hook and its keyword arguments."""

    prepare_func: str
    """Registered name (in the run's hook modules) or import string ``pkg.mod:func``."""
    prepare_args: dict[str, Any] = msgspec.field(default_factory=dict)


class CleanupSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """MCP-Universe ``TaskCleanupConfig``: undo what a tool call changed.

    With ``tool`` set it runs once per call of ``server``'s ``tool`` in the trajectory, ``cleanup_args``
    may read that call's arguments (``"$name"``) or result (``"$return -> get(id)"``); with ``tool``
    empty it runs once. ``cleanup_func`` is a registered cleanup hook, else a tool of ``server``.
    """

    cleanup_func: str
    server: str = ""
    tool: str = ""
    cleanup_args: Any = msgspec.field(default_factory=dict)


class ReferenceCall(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A tool call a correct trajectory makes: the reference of the tool reward's correctness term."""

    server: str
    """The server's name in the registry."""
    tool: str
    """The tool's own name on its server (the model calls ``<server>__<tool>``)."""
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    """The reference argument values, matched exactly."""
    required: tuple[str, ...] | None = None
    """Keys a call must give; ``None`` means every key of ``arguments``."""

    @property
    def name(self) -> str:
        """The namespaced name the model calls."""
        return f"{self.server}__{self.tool}"

    @property
    def required_keys(self) -> tuple[str, ...]:
        return tuple(self.arguments) if self.required is None else self.required


class TaskSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One validated task. ``parse_task`` requires the prompt, servers and evaluators; the defaults
    here serve tasks built in code (tests, benches)."""

    instance_id: str
    instruction: str
    mcp_servers: tuple[McpServerRef, ...] = ()
    evaluators: tuple[EvaluatorSpec, ...] = ()
    output_format: dict[str, Any] | str | None = None
    """How the final answer must look: an MCP-Universe JSON template (dict) or a plain sentence."""
    category: str = "general"
    use_specified_server: bool = False
    """Show the model only the task's servers (not every server of the registry)."""
    dockerfile_path: str | None = None
    build_args: dict[str, str] = msgspec.field(default_factory=dict)
    prepares: tuple[PrepareSpec, ...] = ()
    cleanups: tuple[CleanupSpec, ...] = ()
    reference_calls: tuple[ReferenceCall, ...] = ()
    """Tool calls a correct trajectory makes, for the tool reward; ``()``: none given."""
    private: dict[str, Any] = msgspec.field(default_factory=dict)
    """The ``_``-prefixed fields of the file, kept verbatim (keys with their underscore)."""

    @property
    def server_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.mcp_servers)


class _TaskFields(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What a task object may contain (before ``question`` folds into ``instruction``)."""

    instance_id: str | None = None
    instruction: str | None = None
    question: str | None = None
    mcp_servers: tuple[McpServerRef, ...] = ()
    evaluators: tuple[EvaluatorSpec, ...] = ()
    output_format: dict[str, Any] | str | None = None
    category: str = "general"
    use_specified_server: bool = False
    dockerfile_path: str | None = None
    build_args: dict[str, str] = msgspec.field(default_factory=dict)
    prepares: tuple[PrepareSpec, ...] = ()
    cleanups: tuple[CleanupSpec, ...] = ()
    reference_calls: tuple[ReferenceCall, ...] = ()


TASK_FIELDS: tuple[str, ...] = tuple(f.name for f in msgspec.structs.fields(_TaskFields))
"""The fields a task object may give (besides ``_``-prefixed private ones)."""

REQUIRED_LISTS = {
    "mcp_servers": 'the servers the task uses, at least one, e.g. [{"name": "calculator"}]',
    "evaluators": "the checks of the answer, at least one (the task succeeds when all of them pass)",
}
"""The lists a task file must give, non-empty (MCP-Universe defaults them to ``[]``; a task without
servers has no tool to use, and one without evaluators would succeed by passing no check)."""

_NESTED: dict[str, type[msgspec.Struct]] = {
    "mcp_servers": McpServerRef,
    "evaluators": EvaluatorSpec,
    "prepares": PrepareSpec,
    "cleanups": CleanupSpec,
    "reference_calls": ReferenceCall,
}


def _accepted(tp: type[msgspec.Struct]) -> list[str]:
    return [f.name for f in msgspec.structs.fields(tp)]


def _unknown_fields(raw: dict[str, Any], where: str, file: str) -> list[SpecError]:
    """Unknown keys of a task and of its nested objects, each with the accepted fields listed."""
    problems = [
        SpecError(
            file,
            f"{where}.{key}",
            f"unknown field; accepted fields: {', '.join(_accepted(_TaskFields))} "
            "(and any field starting with '_')",
        )
        for key in raw
        if key not in _accepted(_TaskFields)
    ]
    for key, tp in _NESTED.items():
        items = raw.get(key)
        if not isinstance(items, list):
            continue
        for j, item in enumerate(items):
            if isinstance(item, dict):
                problems.extend(
                    SpecError(
                        file,
                        f"{where}.{key}[{j}].{k}",
                        f"unknown field; accepted fields: {', '.join(_accepted(tp))}",
                    )
                    for k in item
                    if k not in _accepted(tp) and not str(k).startswith("_")
                )
    return problems


def _drop_private(value: Any) -> Any:
    """Nested objects may carry ``_`` notes too; they are not part of the spec."""
    if isinstance(value, list):
        return [
            {k: v for k, v in x.items() if not str(k).startswith("_")} if isinstance(x, dict) else x
            for x in value
        ]
    return value


def _missing_fields(raw: dict[str, Any], where: str, file: str) -> list[SpecError]:
    """The required fields a task object lacks: its prompt, its servers and its evaluators."""
    problems: list[SpecError] = []
    if "instruction" not in raw and "question" not in raw:
        problems.append(
            SpecError(
                file,
                f"{where}.instruction",
                "missing 'instruction' (or its alias 'question'): the prompt of the task",
            )
        )
    for key, what in REQUIRED_LISTS.items():
        if key not in raw:
            problems.append(SpecError(file, f"{where}.{key}", f"missing: {what}"))
    return problems


def parse_task(raw: Any, file: str, index: int, default_id: str) -> TaskSpec:
    """Validate one decoded task object; ``SpecError``/``SpecErrors`` name ``task[index]`` and the field."""
    where = f"task[{index}]"
    if not isinstance(raw, dict):
        raise SpecError(file, where, f"expected a task object, got {type(raw).__name__}")
    private = {k: v for k, v in raw.items() if str(k).startswith("_")}
    public = {
        k: _drop_private(v) if k in _NESTED else v for k, v in raw.items() if not str(k).startswith("_")
    }
    raise_all(_unknown_fields(public, where, file) + _missing_fields(public, where, file))
    try:
        fields = msgspec.convert(public, _TaskFields)
    except msgspec.ValidationError as e:
        raise SpecError(file, *split_validation_error(e, where)) from None
    if (
        fields.instruction is not None
        and fields.question is not None
        and fields.instruction != fields.question
    ):
        raise SpecError(
            file, f"{where}.question", "both 'instruction' and its alias 'question' are given and differ"
        )
    instruction = fields.instruction if fields.instruction is not None else fields.question
    problems: list[SpecError] = []
    if not instruction or not instruction.strip():
        key = "instruction" if fields.instruction is not None else "question"
        problems.append(SpecError(file, f"{where}.{key}", "empty; expected the prompt of the task"))
    problems.extend(
        SpecError(file, f"{where}.{key}", f"empty; expected {what}")
        for key, what in REQUIRED_LISTS.items()
        if not getattr(fields, key)
    )
    problems.extend(
        SpecError(file, f"{where}.evaluators[{j}].func", "empty; use 'raw' for the output as it is")
        for j, ev in enumerate(fields.evaluators)
        if not ev.func.strip()
    )
    problems.extend(_reference_call_problems(fields, where, file))
    raise_all(problems)
    values = msgspec.structs.asdict(fields)
    del values["question"]
    values.update(instance_id=fields.instance_id or default_id, instruction=instruction, private=private)
    return TaskSpec(**values)


def _reference_call_problems(fields: _TaskFields, where: str, file: str) -> list[SpecError]:
    """Reference calls that name no server or tool, require a key they do not give, or use a server
    (or tool) outside the task's ``mcp_servers`` when the task lists them."""
    servers = {s.name: s for s in fields.mcp_servers}
    problems: list[SpecError] = []
    for j, call in enumerate(fields.reference_calls):
        at = f"{where}.reference_calls[{j}]"
        for key in ("server", "tool"):
            if not getattr(call, key).strip():
                problems.append(SpecError(file, f"{at}.{key}", f"empty; expected the {key}'s name"))
        if call.required is not None:
            seen: set[str] = set()
            for key in call.required:
                if key not in call.arguments:
                    problems.append(
                        SpecError(
                            file,
                            f"{at}.required",
                            f"required key {key!r} is not among the arguments "
                            f"({', '.join(map(repr, call.arguments)) or 'none'}); "
                            "give its reference value in 'arguments'",
                        )
                    )
                elif key in seen:
                    problems.append(
                        SpecError(file, f"{at}.required", f"required key {key!r} is listed twice")
                    )
                seen.add(key)
        if not servers or not call.server.strip():
            continue
        server = servers.get(call.server)
        if server is None:
            problems.append(
                SpecError(
                    file,
                    f"{at}.server",
                    f"{call.server!r} is not among the task's mcp_servers ({', '.join(servers)})",
                )
            )
        elif server.tools is not None and call.tool.strip() and call.tool not in server.tools:
            problems.append(
                SpecError(
                    file,
                    f"{at}.tool",
                    f"{call.tool!r} is not among the tools the task shows of {call.server!r} "
                    f"({', '.join(server.tools) or 'none'})",
                )
            )
    return problems


def fill_task_templates(raw: Any, file: str, index: int, variables: Mapping[str, str]) -> Any:
    """``raw`` with every ``{{VAR}}`` in its strings filled from ``variables`` (``specs.templates``);
    ``SpecError``s name ``task[index]``, the field and each variable that is not set."""
    problems: list[SpecError] = []

    def on_string(text: str, where: str) -> str:
        filled, missing = fill(text, variables)
        problems.extend(
            SpecError(
                file,
                f"task[{index}].{where}",
                f"template variable {name} is not set (give it in the run config's domain.task_vars "
                "or the environment)",
            )
            for name in missing
        )
        return filled

    filled = walk(raw, "", on_string) if isinstance(raw, dict) else raw
    raise_all(problems)
    return filled


def parse_tasks(data: Any, file: str, variables: Mapping[str, str] | None = None) -> list[TaskSpec]:
    """Validate a decoded task file (one object or a list); every problem is reported. Templates
    ``{{VAR}}`` are filled from ``variables`` (default: ``specs.templates.environment()``)."""
    stem = Path(file).stem
    items = data if isinstance(data, list) else [data]
    if isinstance(data, list) and not data:
        raise SpecError(file, "top level", "empty task list")
    values = environment() if variables is None else variables
    tasks: list[TaskSpec] = []
    problems: list[SpecError] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(items):
        default_id = stem if not isinstance(data, list) else f"{stem}-{i:04d}"
        try:
            task = parse_task(fill_task_templates(raw, file, i, values), file, i, default_id)
        except SpecError as e:
            problems.extend(getattr(e, "problems", (e,)))
            continue
        if task.instance_id in seen:
            first = seen[task.instance_id]
            problems.append(
                SpecError(
                    file, f"task[{i}].instance_id", f"duplicate {task.instance_id!r} (first at task[{first}])"
                )
            )
        seen.setdefault(task.instance_id, i)
        tasks.append(task)
    raise_all(problems)
    return tasks


def load_tasks(path: str | os.PathLike[str], variables: Mapping[str, str] | None = None) -> list[TaskSpec]:
    """Load a task file, its ``{{VAR}}``s filled from ``variables`` (default: the process
    environment); ``SpecError`` (or ``SpecErrors`` listing every problem) if it is malformed."""
    return parse_tasks(read_json_file(path), str(path), variables)
