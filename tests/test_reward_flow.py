"""One reward flow: an episode scored by the Evaluator is trained on through its typed Score only.

Real calculator episodes (local backend, the real MCP server, the scripted expert and a wrong-answer
variant) go through the rollout pipeline; the Evaluator scores them with the tool family on and the
reasoning and adoption families off; the learner samples and the PPO loss are built from the score.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch

from actors.evaluator import Evaluator
from launch.steps import step_samples
from policies.advantages import group_advantages
from policies.batch import rl_samples
from policies.losses import ppo_clip_loss
from policies.metrics import episode_metrics
from specs.config import load_run_config
from specs.scoring import ScoringConfig
from specs.task import load_tasks
from specs.trajectory import Score, Trajectory, Verdict
from tests.test_rollout import DOMAIN, REPO, run_pipeline, wrong_once

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


async def test_one_episode_from_the_evaluator_to_the_loss_reads_only_the_typed_score(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    [task] = load_tasks(DOMAIN / "tasks" / "train.json")[:1]
    evaluator = Evaluator(("specs.domains.calculator.hooks",), ScoringConfig(tool_reward=True))
    right, _, _ = await run_pipeline(tmp_path / "right", tokenizer, [task], 1, evaluator=evaluator)
    wrong, _, _ = await run_pipeline(
        tmp_path / "wrong", tokenizer, [task], 1, wrong_once, evaluator=evaluator
    )
    solved, failed = right[0].trajectories[0], wrong[0].trajectories[0]
    assert solved.score is not None and failed.score is not None

    # The score: verdicts, one success, the task reward, the tool family on, the others None.
    assert [v.passed for v in solved.score.verdicts] == [True] and solved.score.success
    assert (solved.score.task, failed.score.task, failed.score.success) == (1.0, 0.0, False)
    assert solved.score.tool == 13.0  # the expert's exact call (12) + the terminal reward (1)
    assert failed.score.tool == 12.0  # the same call; a wrong answer withholds r_term
    assert (solved.score.reasoning, solved.score.adoption) == (None, None)

    # Metrics read the score: success, the task reward and the family that is on; no reasoning row.
    metrics = episode_metrics([solved, failed])
    assert (metrics["success"], metrics["reward"], metrics["tool_reward"]) == (0.5, 0.5, 12.5)
    assert "reasoning_reward" not in metrics

    # Advantages read the score: one group of the two episodes, either signal.
    group = [solved, msgspec.structs.replace(failed, group_id=solved.group_id)]
    for signal, values in (("task", [1.0, 0.0]), ("tool", [13.0, 12.0])):
        samples = rl_samples([group], action_signal=signal)  # type: ignore[arg-type]
        expected = group_advantages(values, [solved.group_id] * 2)
        assert [s.advantage for s in samples] == pytest.approx(expected)
        # The loss reads the sample's advantage: at ratio 1 each sample's token-mean loss is -A.
        for sample, advantage in zip(samples, expected, strict=True):
            lp = torch.tensor([sample.logprobs])
            mask = torch.tensor([sample.trainable], dtype=torch.float32)
            loss, _ = ppo_clip_loss(lp, lp, torch.tensor([sample.advantage]), mask, clip_low=0.2)
            assert float(loss) == pytest.approx(-advantage)
    with pytest.raises(ValueError, match=r"no reasoning reward \(Score.reasoning is None\)"):
        rl_samples([group], reasoning=True)


def _scored(group: str, success: bool, **families: Any) -> Trajectory:
    return Trajectory(
        task_id=group,
        group_id=group,
        token_ids=[1, 2, 3],
        trainable=[0, 1, 1],
        logprobs=[0.0, -0.5, -0.5],
        versions=[0],
        messages=[],
        num_turns=1,
        score=Score.of((Verdict(func="raw", op="=", passed=success),), **families),
    )


def test_the_config_picks_which_family_of_the_score_each_stream_learns_from() -> None:
    # task [1, 0] and tool [2, 6]: the outcome gives A = [+0.71, -0.71], the tool family the opposite
    group = [_scored("g", True, tool=2.0, reasoning=0.9), _scored("g", False, tool=6.0, reasoning=0.1)]
    plain = step_samples(load_run_config(None, []), [group])
    assert [s.advantage for s in plain] == pytest.approx([0.7071, -0.7071], abs=1e-4)
    tool = step_samples(load_run_config(None, ["algorithm.tool_reward=true"]), [group])
    assert [s.advantage for s in tool] == pytest.approx([-0.7071, 0.7071], abs=1e-4)
    both = load_run_config(None, ["rollout.reasoning_format=think", "algorithm.reasoning_reward=true"])
    assert [s.reasoning_advantage for s in step_samples(both, [group])] == pytest.approx(
        [0.7071, -0.7071], abs=1e-4
    )


def test_a_family_the_config_trains_on_but_the_score_lacks_is_refused_not_read_as_zero() -> None:
    group = [_scored("g", True), _scored("g", False)]  # an Evaluator that computed no family
    with pytest.raises(ValueError, match=r"no tool reward \(Score.tool is None\)"):
        step_samples(load_run_config(None, ["algorithm.tool_reward=true"]), [group])
    with pytest.raises(ValueError, match=r"no adoption score \(Score.adoption is None\)"):
        step_samples(load_run_config(None, ["algorithm.returns=adoption"]), [group])
