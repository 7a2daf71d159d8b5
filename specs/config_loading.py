"""Loading a tree of msgspec config Structs from YAML and ``key.path=value`` overrides, typed by field.

``load_config(Root, path, overrides)`` reads the YAML file (PyYAML's safe loader), applies each
override and converts the result to ``Root`` with msgspec. Every value is read as its field's type:
the conversion is msgspec's non-strict one, which parses a string into the number or bool a field
holds and refuses what does not parse. PyYAML follows YAML 1.1, where ``1e-5`` (no dot) is a string;
so ``lr: 1e-5`` becomes ``1e-05`` for a float field, ``steps: 1e3`` ``1000`` for an int field, and a
string field keeps its text (``run_name: 1e5`` is ``"1e5"``). Ints are accepted by float fields and
integral floats by int fields; a bool field takes ``true``/``false`` (also ``1``/``0``).

On the command line a field that takes text (a string or a choice of strings) gets the text typed
when YAML would read something else (``run_name=2024`` is ``"2024"``, ``placement=yes`` is ``"yes"``,
refused as no choice); ``null`` still clears an optional text field. An override may reach
into an optional section (``rollout.observation_rule.keep_last_costly=2``). Unknown keys are refused
with the valid keys at that level; a wrong value with the file, the field, the expected type and the
value given. This module imports no ML library.
"""

from __future__ import annotations

import os
import re
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import msgspec
import yaml

from specs.errors import SpecError, raise_all, split_validation_error

StructT = TypeVar("StructT", bound=msgspec.Struct)
COMMAND_LINE = "command line"


def _members(tp: Any) -> tuple[Any, ...]:
    """The types of a union (``X | None``), or ``(tp,)``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return (tp,)


def struct_fields(tp: Any) -> dict[str, Any] | None:
    """Field name -> type of a Struct type (or of an optional one, ``S | None``), else ``None``."""
    structs = [m for m in _members(tp) if isinstance(m, type) and issubclass(m, msgspec.Struct)]
    if len(structs) != 1:
        return None
    return {f.name: f.type for f in msgspec.structs.fields(structs[0])}


def _literal_choices(root: type[msgspec.Struct], where: str) -> tuple[Any, ...]:
    """The allowed values when the field at ``where`` (``a.b``) is a ``Literal``, else ``()``."""
    tp: Any = root
    for key in where.split("."):
        fields = struct_fields(tp)
        if fields is None or key not in fields:
            return ()
        tp = fields[key]
    return tuple(c for m in _members(tp) if typing.get_origin(m) is Literal for c in typing.get_args(m))


def _value_at(data: Any, where: str) -> tuple[bool, Any]:
    """``(found, value)`` at a msgspec error path like ``learner.betas[1]``."""
    node = data
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", where):
        if name and isinstance(node, dict) and name in node:
            node = node[name]
        elif index and isinstance(node, list | tuple) and int(index) < len(node):
            node = node[int(index)]
        else:
            return False, None
    return True, node


def unknown_keys(data: Any, tp: Any, path: str, file: str) -> list[SpecError]:
    """Every key of ``data`` (nested) that is not a field of the Struct type ``tp``, with the valid ones."""
    fields = struct_fields(tp)
    if fields is None or not isinstance(data, dict):
        return []
    problems: list[SpecError] = []
    for key, value in data.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in fields:
            level = path or "top level"
            problems.append(
                SpecError(file, where, f"unknown key; valid keys at {level}: {', '.join(fields)}")
            )
        else:
            problems.extend(unknown_keys(value, fields[key], where, file))
    return problems


def _override_value(raw: str, tp: Any, where: str) -> Any:
    """The YAML value of ``raw``; its text instead when the field takes text and YAML reads another type."""
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        raise SpecError(COMMAND_LINE, where, f"value is not valid YAML: {e}") from None
    members = _members(tp)
    takes_text = any(
        m is str or (typing.get_origin(m) is Literal and any(isinstance(c, str) for c in typing.get_args(m)))
        for m in members
    )
    if takes_text and not isinstance(value, str) and not (value is None and type(None) in members):
        return raw.strip()
    return value


def apply_override(data: dict[str, Any], override: str, root: type[msgspec.Struct]) -> None:
    """Set the value ``key.path=value`` names in the raw ``data`` of a ``root`` config."""
    key_path, sep, raw = override.partition("=")
    where = f"override {override!r}"
    if not sep or not key_path.strip():
        raise SpecError(COMMAND_LINE, where, "expected key.path=value")
    keys = key_path.strip().split(".")
    node: dict[str, Any] = data
    tp: Any = root
    for depth, key in enumerate(keys):
        fields = struct_fields(tp)
        here = ".".join(keys[:depth]) or "top level"
        if fields is None and typing.get_origin(tp) is dict and depth == len(keys) - 1:
            node[key] = _override_value(raw, typing.get_args(tp)[1], where)  # a map's entry: task_vars.X=1
            return
        if fields is None:
            raise SpecError(COMMAND_LINE, where, f"{here} is not a section; it has no key {key!r}")
        if key not in fields:
            raise SpecError(
                COMMAND_LINE, where, f"unknown key {key!r}; valid keys at {here}: {', '.join(fields)}"
            )
        if depth == len(keys) - 1:
            node[key] = _override_value(raw, fields[key], where)
            return
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node, tp = child, fields[key]


def read_yaml_mapping(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The top-level mapping of a YAML file (``{}`` when empty); ``SpecError`` naming the file otherwise."""
    file = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise SpecError(file, "file", "no such file") from None
    except yaml.YAMLError as e:
        raise SpecError(file, "file", f"invalid YAML: {e}") from None
    if not isinstance(data, dict):
        raise SpecError(
            file, "top level", f"expected a mapping of config sections, got {type(data).__name__}"
        )
    return data


def _explain(message: str, found: bool, value: Any, choices: tuple[Any, ...]) -> str:
    """The msgspec message, with the value given and what would have been accepted."""
    if found and "got `" in message and not isinstance(value, dict | list):
        message += f" ({value!r})"
    if choices:
        message += f"; expected one of: {', '.join(map(str, choices))}"
    elif message.startswith("Expected `str") and found and not isinstance(value, str | dict | list):
        message += "; quote the value to keep it as text"
    return message


def load_config(
    root: type[StructT], path: str | os.PathLike[str] | None, overrides: Sequence[str] = ()
) -> StructT:
    """Load ``root`` from a YAML file (``None``: all defaults), apply ``key.path=value`` overrides, validate."""
    file = str(path) if path is not None else "<defaults>"
    data: dict[str, Any] = read_yaml_mapping(path) if path is not None else {}
    raise_all(unknown_keys(data, root, "", file))
    for override in overrides:
        apply_override(data, override, root)
    if overrides:
        file = f"{file} (with overrides {' '.join(overrides)})"
    try:
        return msgspec.convert(data, root, strict=False)
    except msgspec.ValidationError as e:
        where, message = split_validation_error(e, "")
        found, value = _value_at(data, where)
        raise SpecError(file, where, _explain(message, found, value, _literal_choices(root, where))) from None
