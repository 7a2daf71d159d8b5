"""Writing task files: what every domain's seeded generator shares.

A generator builds its tasks as plain dicts; ``write_task_files`` refuses any task the loader would
refuse (``specs.task.parse_tasks``), then writes each file with ``render``: indented JSON, keys in
insertion order, UTF-8, one trailing newline, so a fresh generation is byte for byte the shipped
file (each domain's tests check that).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specs.task import parse_tasks


def render(tasks: Sequence[Any]) -> str:
    """The text of a task file (or any generated JSON list) as the generators write it."""
    return json.dumps(list(tasks), indent=2, ensure_ascii=False) + "\n"


def write_task_files(
    directory: Path, files: Mapping[str, Sequence[dict[str, Any]]], variables: Mapping[str, str] | None = None
) -> None:
    """Check, then write ``directory/<name>`` for each ``name -> tasks``; ``variables`` fill the
    tasks' ``{{VAR}}`` templates for the check only (the files keep the templates)."""
    for name, tasks in files.items():
        parse_tasks(list(tasks), str(directory / name), variables)  # SpecError before anything is written
    directory.mkdir(parents=True, exist_ok=True)
    for name, tasks in files.items():
        (directory / name).write_text(render(tasks), encoding="utf-8")
