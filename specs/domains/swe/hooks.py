"""Hooks of the swe domain: check out the buggy project, then score it with the hidden tests.

``swe.checkout`` (prepare) fills the environment's working directory with the task's project and
plants its bug. On the docker backend the task's image (``projects/Dockerfile``, ``PROJECT`` build
argument) holds the pristine project at ``/opt/swe/project`` and it is copied from there; elsewhere
(bwrap, local) the project's files travel from this package as one ``tar -x`` with the archive on
stdin. Then the mutated file is written: the pristine file with ``original`` replaced by
``mutated`` at ``line`` (checked, so a project and a task that disagree fail the prepare loudly).

``swe.hidden_tests`` (evaluator) runs the project's hidden tests (``hidden/<project>/check_*.py``,
never visible to the agent) inside the same environment after the episode: ``testrun.py`` goes in
as ``/usr/bin/python3 -c`` with the tests on stdin and writes them to a fresh temporary directory,
not the project. Binary: passed when every hidden test passes; the message names the failing tests
and the first reason. A project the agent broke (a deleted module, a syntax error, a hang) is a
failed check with that reason, not an exception; only an environment that is gone raises.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from rewards.ops import EvalOutcome
from specs.domains.swe import catalog
from specs.domains.swe.mutate import Mutation
from specs.domains.swe.testrun import MARKER
from specs.env import EnvHandle
from specs.registry import evaluator, prepare
from specs.task import TaskSpec

PYTHON = "/usr/bin/python3"
HIDDEN_TIMEOUT_S = 60.0
_UNPACK = (
    f"if [ -d {catalog.IMAGE_PROJECT} ]; then cat >/dev/null && cp -R {catalog.IMAGE_PROJECT}/. . "
    "&& find . -name __pycache__ -prune -exec rm -rf {} +; else tar -x -f -; fi"
)


@prepare("swe.checkout")
async def checkout(
    env: EnvHandle, task: TaskSpec, *, project: str, file: str, line: int, original: str, mutated: str
) -> None:
    """Put ``project`` into the working directory with the task's bug planted in ``file``."""
    where = f"swe.checkout for task {task.instance_id} in env {env.info.env_id}"
    files = catalog.files(project)
    if file not in files:
        raise ValueError(f"{where}: project {project!r} has no file {file!r}")
    result = await env.run(["sh", "-c", _UNPACK], stdin=catalog.tar_bytes(project), timeout_s=60.0)
    if result.returncode != 0:
        raise OSError(f"{where}: unpacking the project failed: {result.stderr.strip()[-500:]}")
    bug = Mutation("planted", file, line, original, mutated, "")
    try:
        source = bug.apply(files[file].decode())
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    await env.write_file(file, source)


def _summary(report: dict[str, Any]) -> EvalOutcome:
    ran, failing = int(report.get("hidden_ran", 0)), list(report.get("hidden_failing", []))
    if ran == 0:
        return EvalOutcome(passed=False, reason="no hidden test ran (the project's modules cannot be loaded)")
    if not failing:
        return EvalOutcome(passed=True, reason=f"all {ran} hidden tests pass")
    reasons = report.get("reasons", {})
    first = reasons.get(failing[0], "")
    names = ", ".join(failing[:8]) + (f" and {len(failing) - 8} more" if len(failing) > 8 else "")
    return EvalOutcome(
        passed=False, reason=f"{len(failing)} of {ran} hidden tests fail: {names} (first: {first})"
    )


@evaluator("swe.hidden_tests")
async def hidden_tests(
    env: EnvHandle, task: TaskSpec, trajectory: Any, value: Any = None, *, project: str
) -> EvalOutcome:
    """Every hidden test of ``project`` passes against the working directory as the agent left it."""
    nonce = secrets.token_hex(8)
    request = {"hidden": catalog.hidden_tests(project), "nonce": nonce}
    result = await env.run(
        [PYTHON, "-c", catalog.runner_source()],
        stdin=json.dumps(request).encode(),
        timeout_s=HIDDEN_TIMEOUT_S,
    )
    prefix = f"{MARKER}{nonce} "
    lines = [line for line in result.stdout.splitlines() if line.startswith(prefix)]
    if not lines:
        if result.returncode == 124:
            return EvalOutcome(passed=False, reason=f"the hidden tests timed out after {HIDDEN_TIMEOUT_S:g}s")
        tail = (result.stderr.strip() or result.stdout.strip())[-300:]
        return EvalOutcome(
            passed=False, reason=f"the hidden tests gave no result (exit code {result.returncode}): {tail}"
        )
    try:
        report = json.loads(lines[-1][len(prefix) :])
    except json.JSONDecodeError as e:
        return EvalOutcome(passed=False, reason=f"the hidden test report is not JSON: {e}")
    return _summary(report)
