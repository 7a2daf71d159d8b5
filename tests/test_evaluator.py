"""The Evaluator: generic ops on the final answer, registered evaluators against the live env."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from actors.evaluator import Evaluator
from specs.env import EnvConfig, EnvHandle, EnvInfo
from actors.provisioners.local import LocalProvisioner
from specs.trajectory import Trajectory
from rewards.ops import EvalOutcome
from specs.errors import EvaluatorError
from specs.registry import evaluator
from specs.task import TaskSpec, parse_tasks

pytestmark = pytest.mark.anyio
HOOKS = ("tests.test_evaluator",)


@evaluator("test.file_holds")
async def file_holds(env: EnvHandle, task: Any, trajectory: Trajectory, value: Any, path: str) -> EvalOutcome:
    content = await env.read_file(path)
    return EvalOutcome(passed=content.strip() == str(value), reason=f"{path} holds {content.strip()!r}")


@evaluator("test.raises")
async def raises(env: EnvHandle, task: Any, trajectory: Trajectory, value: Any) -> EvalOutcome:
    raise KeyError("the table the evaluator reads")


def task(*evaluators: dict[str, Any]) -> Any:
    return parse_tasks(
        {
            "instance_id": "t",
            "instruction": "do it",
            "mcp_servers": [{"name": "calculator"}],
            "evaluators": list(evaluators),
        },
        "t.json",
    )[0]


def answered(text: str | None) -> Trajectory:
    return Trajectory(
        task_id="t",
        group_id="g",
        token_ids=[],
        trainable=[],
        logprobs=[],
        versions=[],
        messages=[],
        final_answer=text,
    )


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[EnvInfo]:
    provisioner = LocalProvisioner(tmp_path)
    info = await provisioner.create(EnvConfig(), "test-run")
    yield info
    await provisioner.destroy(info)


async def test_every_evaluator_must_pass_and_each_verdict_is_kept(env: EnvInfo) -> None:
    await EnvHandle(env, LocalProvisioner()).write_file("db.txt", "387\n")
    spec = task(
        {"func": "number", "op": "approx", "value": 387},
        {"func": "raw", "op": "test.file_holds", "value": 387, "op_args": {"path": "db.txt"}},
    )
    with anyio.fail_after(30):
        reward, details = await Evaluator(HOOKS).evaluate(spec, answered("The answer is 387."), env)
        assert reward == 1.0 and [v["passed"] for v in details["evaluators"]] == [True, True]
        reward, details = await Evaluator(HOOKS).evaluate(spec, answered("The answer is 386."), env)
    assert reward == 0.0 and [v["passed"] for v in details["evaluators"]] == [False, True]


async def test_no_final_answer_fails_generic_ops_without_crashing(env: EnvInfo) -> None:
    reward, details = await Evaluator(HOOKS).evaluate(
        task({"func": "number", "op": "=", "value": 1}), answered(None), env
    )
    assert reward == 0.0 and details["evaluators"][0]["reason"] == "no final answer"


async def test_a_crashing_or_unknown_evaluator_is_an_error_never_a_zero(env: EnvInfo) -> None:
    with pytest.raises(EvaluatorError, match="KeyError"):
        await Evaluator(HOOKS).evaluate(task({"func": "raw", "op": "test.raises"}), answered("x"), env)
    with pytest.raises(Exception, match="test.missing"):
        await Evaluator(HOOKS).evaluate(task({"func": "raw", "op": "test.missing"}), answered("x"), env)
    with pytest.raises(EvaluatorError, match="no evaluators"):
        await Evaluator(HOOKS).evaluate(TaskSpec(instance_id="t", instruction="do it"), answered("x"), env)
