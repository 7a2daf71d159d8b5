"""The Evaluator: generic ops on the final answer, registered evaluators against the live env."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from actors.evaluator import Evaluator
from actors.provisioners.local import LocalProvisioner
from rewards.ops import EvalOutcome
from specs.config import load_run_config
from specs.env import EnvConfig, EnvHandle, EnvInfo
from specs.errors import EvaluatorError, SpecError
from specs.registry import evaluator
from specs.scoring import AdoptionScoring, ScoringConfig, scoring_for
from specs.task import TaskSpec, parse_tasks
from specs.trajectory import Trajectory
from tests.factories import answered

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
        passed = await Evaluator(HOOKS).evaluate(spec, answered("The answer is 387."), env)
        assert (passed.success, passed.task) == (True, 1.0) and [v.passed for v in passed.verdicts] == [
            True,
            True,
        ]
        failed = await Evaluator(HOOKS).evaluate(spec, answered("The answer is 386."), env)
    assert (failed.success, failed.task) == (False, 0.0) and [v.passed for v in failed.verdicts] == [
        False,
        True,
    ]
    # families that are off are not computed: None, never 0.0
    assert (failed.tool, failed.reasoning, failed.adoption) == (None, None, None)


async def test_no_final_answer_fails_generic_ops_without_crashing(env: EnvInfo) -> None:
    score = await Evaluator(HOOKS).evaluate(
        task({"func": "number", "op": "=", "value": 1}), answered(None), env
    )
    assert not score.success and score.verdicts[0].message == "no final answer"


async def test_an_episode_cut_by_a_limit_gets_the_truncated_reward_and_keeps_its_success(
    env: EnvInfo,
) -> None:
    """``algorithm.truncated_reward``: an end-state evaluator passes an agent that made the change
    and then looped to the turn limit; with the rule its task reward is the rule's, its success
    (the metric) stays the evaluators'. An episode that answered is not touched."""
    await EnvHandle(env, LocalProvisioner()).write_file("db.txt", "387\n")
    spec = task({"func": "raw", "op": "test.file_holds", "value": 387, "op_args": {"path": "db.txt"}})
    looped = msgspec.structs.replace(answered(None), truncated=True)
    kept = await Evaluator(HOOKS).evaluate(spec, looped, env)
    assert (kept.success, kept.task) == (True, 1.0)
    ruled = Evaluator(HOOKS, ScoringConfig(truncated_task=0.0))
    cut = await ruled.evaluate(spec, looped, env)
    assert (cut.success, cut.task) == (True, 0.0) and cut.verdicts == kept.verdicts
    finished = await ruled.evaluate(spec, answered("Done."), env)
    assert (finished.success, finished.task) == (True, 1.0)
    cfg = load_run_config(None, ["algorithm.truncated_reward=0"])
    assert (
        scoring_for(cfg).truncated_task == 0.0 and scoring_for(load_run_config(None)).truncated_task is None
    )
    with pytest.raises(SpecError, match="algorithm.truncated_reward must be a finite number, got nan"):
        load_run_config(None, ["algorithm.truncated_reward=nan"])


async def test_a_crashing_or_unknown_evaluator_is_an_error_never_a_zero(env: EnvInfo) -> None:
    with pytest.raises(EvaluatorError, match="KeyError"):
        await Evaluator(HOOKS).evaluate(task({"func": "raw", "op": "test.raises"}), answered("x"), env)
    with pytest.raises(Exception, match="test.missing"):
        await Evaluator(HOOKS).evaluate(task({"func": "raw", "op": "test.missing"}), answered("x"), env)
    with pytest.raises(EvaluatorError, match="no evaluators"):
        await Evaluator(HOOKS).evaluate(TaskSpec(instance_id="t", instruction="do it"), answered("x"), env)


class BrokenScorer:
    """A reasoning scorer whose model cannot be used (as when its package fails to load)."""

    fmt = "think"

    def score(self, instruction: str, reasoning: str, *, turns: Any = ()) -> Any:
        raise OSError("all-MiniLM-L6-v2 is not installed")


async def test_a_reward_family_that_cannot_be_computed_is_an_evaluator_error_never_a_zero(
    env: EnvInfo,
) -> None:
    spec = task({"func": "number", "op": "=", "value": 1})
    scorer = Evaluator(HOOKS, ScoringConfig(reasoning_format="think"), reasoning_scorer=BrokenScorer())  # type: ignore[arg-type]
    with pytest.raises(EvaluatorError, match="task t: a reward family failed: OSError: all-MiniLM"):
        await scorer.evaluate(spec, answered("1"), env)
    adoption = AdoptionScoring(lambda_len=0.05, lambda_cap=0.2, lambda_mcp=0.1, max_steps=4)
    scored = await Evaluator(HOOKS, ScoringConfig(adoption=adoption)).evaluate(spec, answered("1"), env)
    assert scored.success and scored.adoption is not None and (scored.tool, scored.reasoning) == (None, None)
    # one step (no recorded turn counts as one), success: R = 1 - 0.05 * 1/4 = 0.9875, no call, no bonus
    assert (scored.adoption.steps, scored.adoption.step_bonus) == (1, (0.0,))
    assert scored.adoption.shaped_return == pytest.approx(0.9875)
