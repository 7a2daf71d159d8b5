"""``python -m specs.check FILE... [--servers FILE] [--hooks MODULE]...``: validate spec files.

Each file's kind is detected: a YAML file is a run config; a JSON object of objects with
``stdio``/``sse``/``http_url`` is a server list; a JSON list, or an object with a task field
(``instruction``/``question``, ``mcp_servers``, ``evaluators``...), is a task file, refused when a
task lacks its prompt, its ``mcp_servers`` or its ``evaluators``. Every problem is printed (to
stderr, one per line, ``file: where: message``) and the exit status is 1; otherwise one summary
line per file is printed and the exit status is 0.

Task files are also checked against a server list (``--servers``, or the run config's) and their
evaluators' ``func`` chains and ops: generic ops always, registered ops and prepare hooks when
hook modules are given (``--hooks``; a cleanup may name a server's tool, so it is not checked). A run config's domain files are checked in turn.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from specs.config import RunConfig, load_run_config
from specs.errors import EvaluatorError, SpecError, raise_all
from specs.evaluator_grammar import GENERIC_OPS, parse_func
from specs.registry import resolve
from specs.servers import ServerRegistry, load_server_registry, parse_server_registry
from specs.task import TASK_FIELDS, TaskSpec, load_tasks, parse_tasks
from specs.templates import StandIns, environment

_TRANSPORTS = ("stdio", "sse", "streamable_http", "http_url")


def _problems(error: SpecError) -> list[SpecError]:
    return list(getattr(error, "problems", (error,)))


def detect_kind(data: Any) -> str:
    """``tasks``, ``servers`` or ``unknown`` for decoded JSON (YAML files are run configs).

    An object of objects with a transport is a server list; any other object with a task field
    (``instruction``, ``mcp_servers``, ``evaluators``...) is a task, checked, so that a task lacking
    its prompt is refused for that and not as a file of unknown kind.
    """
    if isinstance(data, list):
        return "tasks"
    if isinstance(data, dict):
        entries = [v for k, v in data.items() if not str(k).startswith("_")]
        if (
            entries
            and all(isinstance(v, dict) for v in entries)
            and any(t in v for v in entries for t in _TRANSPORTS)
        ):
            return "servers"
        if any(key in TASK_FIELDS for key in data):
            return "tasks"
    return "unknown"


def load_checked_tasks(
    path: str,
    servers: str,
    hook_modules: Sequence[str],
    limit: int | None = None,
    variables: Mapping[str, str] | None = None,
) -> list[TaskSpec]:
    """The first ``limit`` tasks of ``path`` (all with ``None``), their templates filled from
    ``variables`` over the environment, refused now rather than mid-run for unknown servers (of the
    server list ``servers``), ops or hooks, and unset ``{{VAR}}``s: ``SpecError`` naming the file,
    the task and the field."""
    tasks = load_tasks(path, environment(variables))[:limit]
    raise_all(check_task_semantics(tasks, path, load_server_registry(servers), hook_modules)[0])
    return tasks


def load_split(
    cfg: RunConfig, split: Literal["train", "eval"], limit: int | None = None
) -> dict[str, list[TaskSpec]]:
    """Each domain's tasks of ``split`` (``domain.tasks`` or ``domain.eval_tasks``), the first
    ``limit`` of each, checked as ``load_checked_tasks`` checks them, by domain name. Instance ids
    must be unique across domains (``SpecError`` naming both files)."""
    out: dict[str, list[TaskSpec]] = {}
    seen: dict[str, str] = {}
    for domain in cfg.domains:
        path = domain.eval_tasks if split == "eval" else domain.tasks
        unknown = sorted(set(domain.gui_servers) - set(load_server_registry(domain.servers).names()))
        if unknown:
            raise SpecError(domain.servers, "domain.gui_servers", f"{unknown} are not servers of this list")
        tasks = load_checked_tasks(path, domain.servers, domain.hook_modules, limit, domain.task_vars)
        for task in tasks:
            if task.instance_id in seen:
                raise SpecError(path, f"task {task.instance_id!r}", f"also in {seen[task.instance_id]}")
            seen[task.instance_id] = path
        out[domain.name] = tasks
    return out


def interleaved(by_domain: Mapping[str, Sequence[TaskSpec]]) -> list[TaskSpec]:
    """The tasks of every domain, taking one of each in turn (a mixed run's task list)."""
    lists = list(by_domain.values())
    return [t for row in itertools.zip_longest(*lists) for t in row if t is not None]


def check_task_semantics(
    tasks: Sequence[TaskSpec], file: str, servers: ServerRegistry | None, hooks: Sequence[str]
) -> tuple[list[SpecError], int]:
    """Problems with server names, func chains, ops and hooks; also the number of unchecked ops."""
    problems: list[SpecError] = []
    unchecked = 0
    for i, task in enumerate(tasks):
        where = f"task[{i}]"
        for j, ref in enumerate(task.mcp_servers):
            if servers is not None and ref.name not in servers:
                problems.append(
                    SpecError(
                        file,
                        f"{where}.mcp_servers[{j}].name",
                        f"unknown MCP server {ref.name!r} in {servers.file}; known: {', '.join(servers.names())}",
                    )
                )
        for j, ev in enumerate(task.evaluators):
            try:
                parse_func(ev.func)
            except EvaluatorError as e:
                problems.append(SpecError(file, f"{where}.evaluators[{j}].func", str(e)))
            if ev.op in GENERIC_OPS:
                continue
            if not hooks:
                unchecked += 1
                continue
            try:
                resolve("evaluator", ev.op, hooks, source=file)
            except SpecError as e:
                problems.append(SpecError(file, f"{where}.evaluators[{j}].op", e.message))
            if ev.op_args is not None and not isinstance(ev.op_args, dict):
                problems.append(
                    SpecError(
                        file,
                        f"{where}.evaluators[{j}].op_args",
                        "a registered evaluator takes op_args as keyword arguments: an object",
                    )
                )
        for j, prep in enumerate(task.prepares):
            if hooks:
                try:
                    resolve("prepare", prep.prepare_func, hooks, source=file)
                except SpecError as e:
                    problems.append(SpecError(file, f"{where}.prepares[{j}].prepare_func", e.message))
    return problems, unchecked


def _check_tasks(file: str, data: Any, servers: ServerRegistry | None, hooks: Sequence[str]) -> str:
    variables = StandIns(environment())  # a task file alone is checked without its values
    tasks = parse_tasks(data, file, variables)
    problems, unchecked = check_task_semantics(tasks, file, servers, hooks)
    raise_all(problems)
    names = sorted({n for t in tasks for n in t.server_names})
    line = f"{file}: {len(tasks)} task{'s' * (len(tasks) != 1)}, servers: {', '.join(names) or '(none)'}"
    if variables.missing:
        line += f", needs {' '.join(sorted(variables.missing))}"
    if unchecked:
        line += f" ({unchecked} registered evaluator ops not checked; pass --hooks)"
    return line


def _check_servers(file: str, data: Any) -> str:
    registry = parse_server_registry(data, file)
    parts = []
    for name in registry.names():
        entry = registry.entry(name)
        transports = [t for t in _TRANSPORTS if getattr(entry, t)]
        needs = f", needs {' '.join(entry.variables())}" if entry.variables() else ""
        parts.append(f"{name} ({'/'.join(transports)}{needs})")
    return f"{file}: {len(parts)} server{'s' * (len(parts) != 1)}: {'; '.join(parts)}"


def _check_config(file: str, hooks: Sequence[str]) -> str:
    cfg = load_run_config(file)
    problems: list[SpecError] = []
    counts = []
    for domain in cfg.domains:
        servers: ServerRegistry | None = None
        try:
            servers = load_server_registry(domain.servers)
        except SpecError as e:
            problems.extend(_problems(e))
        for task_file in (domain.tasks, domain.eval_tasks):
            try:
                tasks = load_tasks(task_file, environment(domain.task_vars))
            except SpecError as e:
                problems.extend(_problems(e))
                continue
            found, _ = check_task_semantics(tasks, task_file, servers, tuple(hooks) or domain.hook_modules)
            problems.extend(found)
            counts.append(len(tasks))
    raise_all(problems)
    names = " + ".join(d.name for d in cfg.domains)
    return f"{file}: run config {cfg.run_name!r}, domain {names} ({' + '.join(map(str, counts))} tasks)"


def check_file(path: str, servers: ServerRegistry | None, hooks: Sequence[str]) -> str:
    """The summary line of a valid file; raises ``SpecError``/``SpecErrors`` listing its problems."""
    p = Path(path)
    if p.suffix in (".yaml", ".yml"):
        return _check_config(path, hooks)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(path, "file", "no such file") from None
    except json.JSONDecodeError as e:
        raise SpecError(path, f"line {e.lineno} column {e.colno}", f"invalid JSON: {e.msg}") from None
    kind = detect_kind(data)
    if kind == "tasks":
        return _check_tasks(path, data, servers, hooks)
    if kind == "servers":
        return _check_servers(path, data)
    raise SpecError(
        path,
        "top level",
        "cannot tell the kind of file: expected a task file (an object or list of "
        "objects with 'instruction' or 'question', 'mcp_servers' and 'evaluators'), a server list (objects with 'stdio', 'streamable_http', 'sse' or "
        "'http_url'), or a YAML run config",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specs.check", description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="task files, server lists and run configs")
    parser.add_argument("--servers", help="server list that task files' mcp_servers must name")
    parser.add_argument(
        "--hooks", action="append", default=[], help="hook module for registered ops (repeatable)"
    )
    args = parser.parse_args(argv)
    failed = False
    servers: ServerRegistry | None = None
    if args.servers:
        try:
            servers = load_server_registry(args.servers)
        except SpecError as e:
            for problem in _problems(e):
                print(problem, file=sys.stderr)
            return 1
    for path in args.files:
        try:
            print(check_file(path, servers, args.hooks))
        except SpecError as e:
            failed = True
            for problem in _problems(e):
                print(problem, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
