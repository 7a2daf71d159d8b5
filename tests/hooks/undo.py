"""A hook module for tests: a per-call cleanup hook that reports what it saw to a list."""

from __future__ import annotations

from typing import Any

from specs.env import EnvHandle
from specs.registry import cleanup
from specs.task import TaskSpec

SEEN: list[dict[str, Any]] = []
"""What each run of ``tests.undo`` saw: its arguments and the file it names, as the env holds it."""


@cleanup("tests.undo")
async def undo(env: EnvHandle, task: TaskSpec, *, name: str, note: str = "") -> None:
    SEEN.append({"task": task.instance_id, "name": name, "note": note, "file": await env.read_file(name)})
