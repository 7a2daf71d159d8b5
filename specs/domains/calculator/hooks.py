"""Hooks of the calculator domain.

The calculator's tasks need no hook: the server is stateless and the answer is checked by the
generic ops ``number`` / ``approx`` (``rewards/ops.py``). This module is the worked example of the
hook conventions (``specs/registry.py``) that stateful domains follow, and the module the demo
config names in ``domain.hook_modules``. A task opts in with::

    "prepares": [{"prepare_func": "calculator.write_instruction", "prepare_args": {"path": "task.txt"}}],
    "cleanups": [{"cleanup_func": "calculator.remove_file", "cleanup_args": {"path": "task.txt"}}]

Hooks run in the process that holds the environment, touch it only through ``EnvHandle`` (so they
work on every provisioner backend), and raise on failure: a failed prepare fails the episode as
an infrastructure error, it is never scored.
"""

from __future__ import annotations

from specs.env import EnvHandle
from specs.registry import cleanup, prepare
from specs.task import TaskSpec


@prepare("calculator.write_instruction")
async def write_instruction(env: EnvHandle, task: TaskSpec, *, path: str = "task.txt") -> None:
    """Write the task's instruction into the environment (a file a tool-using agent could read)."""
    await env.write_file(path, task.instruction + "\n")


@cleanup("calculator.remove_file")
async def remove_file(env: EnvHandle, task: TaskSpec, *, path: str = "task.txt") -> None:
    """Remove a file a prepare hook wrote; a missing file is fine (cleanup is idempotent)."""
    result = await env.run(["rm", "-f", "--", path])
    if result.returncode != 0:
        raise OSError(
            f"remove_file({path!r}) in env {env.info.env_id} for task {task.instance_id}: {result.stderr.strip()}"
        )
