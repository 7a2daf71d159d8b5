"""Function registry for a domain's ``prepare``, ``cleanup`` and ``evaluator`` hooks.

The decorators only tag a function with ``(kind, name)``; nothing is stored in a module global, so
a Ray worker sees exactly what it imports. ``resolve`` runs inside the process that calls the hook:
an import string (``"specs.domains.calculator.hooks:write_instruction"``) is imported directly; a
bare name is looked up among the tagged functions of the run's hook modules (the scan is cached
per process). Hook conventions::

    @prepare("calculator.write_instruction")
    async def write_instruction(env: EnvHandle, task: TaskSpec, **prepare_args) -> None: ...

    @cleanup("name")
    async def undo(env: EnvHandle, task: TaskSpec, **cleanup_args) -> None: ...

    @evaluator("domain.check")
    async def check(env: EnvHandle, task: TaskSpec, trajectory: Trajectory, value, **op_args) -> EvalOutcome: ...

A registered evaluator reads the model's answer from ``trajectory.final_answer`` and the live
environment through ``env``; it gets the spec's ``value`` (the ground truth, ``None`` when the
task gives none) and its ``op_args`` as keywords. The ``func`` chain applies to generic ops only.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from specs.errors import SpecError

HookKind = Literal["prepare", "cleanup", "evaluator"]
KINDS: tuple[HookKind, ...] = ("prepare", "cleanup", "evaluator")
_TAG = "__mcprl_hooks__"
F = TypeVar("F", bound=Callable[..., Any])


def _tagger(kind: HookKind, name: str) -> Callable[[F], F]:
    if not name or not isinstance(name, str):
        raise ValueError(f"@{kind} needs a non-empty name")

    def tag(fn: F) -> F:
        tags: frozenset[tuple[str, str]] = getattr(fn, _TAG, frozenset())
        setattr(fn, _TAG, tags | {(kind, name)})
        return fn

    return tag


def prepare(name: str) -> Callable[[F], F]:
    """Register a prepare hook: ``async def fn(env, task, **prepare_args) -> None``."""
    return _tagger("prepare", name)


def cleanup(name: str) -> Callable[[F], F]:
    """Register a cleanup hook: ``async def fn(env, task, **cleanup_args) -> None``."""
    return _tagger("cleanup", name)


def evaluator(name: str) -> Callable[[F], F]:
    """Register an evaluator: ``async def fn(env, task, trajectory, **op_args) -> EvalOutcome``."""
    return _tagger("evaluator", name)


def registered_names(fn: Callable[..., Any], kind: HookKind) -> list[str]:
    """Names ``fn`` is registered under for ``kind``."""
    return sorted(n for k, n in getattr(fn, _TAG, frozenset()) if k == kind)


def _import(module: str, source: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise SpecError(source, f"module {module!r}", f"cannot import hook module: {e}") from None


@functools.lru_cache(maxsize=64)
def _scan(kind: HookKind, modules: tuple[str, ...], source: str) -> dict[str, Callable[..., Any]]:
    found: dict[str, tuple[str, Callable[..., Any]]] = {}
    for module in modules:
        mod = _import(module, source)
        for attr in vars(mod).values():
            if not callable(attr) or getattr(attr, "__module__", None) != mod.__name__:
                continue  # only functions defined in the module, not ones it imported
            for name in registered_names(attr, kind):
                if name in found and found[name][1] is not attr:
                    raise SpecError(
                        source, f"{kind} {name!r}", f"registered twice: in {found[name][0]} and {module}"
                    )
                found[name] = (module, attr)
    return {name: fn for name, (_, fn) in found.items()}


def available(
    kind: HookKind, modules: Sequence[str], source: str = "hook registry"
) -> dict[str, Callable[..., Any]]:
    """Every function registered for ``kind`` in ``modules`` (imported here), by name."""
    if kind not in KINDS:
        raise ValueError(f"unknown hook kind {kind!r}; expected one of {', '.join(KINDS)}")
    return dict(_scan(kind, tuple(modules), source))


def resolve_import(ref: str, source: str = "import string") -> Callable[..., Any]:
    """The callable an import string ``pkg.mod:func`` names, imported in this process."""
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise SpecError(source, repr(ref), "expected an import string 'package.module:function'")
    fn: object = getattr(_import(module, source), attr, None)
    if not callable(fn):
        raise SpecError(source, repr(ref), f"module {module!r} has no function {attr!r}")
    return fn


def resolve(
    kind: HookKind, ref: str, modules: Sequence[str], source: str = "hook registry"
) -> Callable[..., Any]:
    """The function ``ref`` names: an import string ``pkg.mod:func`` or a name registered in ``modules``.

    ``source`` names where the reference came from (a task file) for the error message.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown hook kind {kind!r}; expected one of {', '.join(KINDS)}")
    if ":" in ref:
        return resolve_import(ref, source)
    registered = _scan(kind, tuple(modules), source)
    if ref not in registered:
        names = ", ".join(sorted(registered)) or "(none)"
        raise SpecError(
            source,
            f"{kind} {ref!r}",
            f"not registered in hook modules [{', '.join(modules)}]; available {kind} names: {names}",
        )
    return registered[ref]
