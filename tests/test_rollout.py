"""The whole rollout pipeline with a scripted policy: real pool, gateway, calculator server, evaluator.

The scripted engine implements the Engine protocol (token ids in, token ids out), so everything
below it is the production path: local environments, MCP sessions to the third-party calculator
over stdio, token-exact recording, MCP-Universe evaluators against the live environment.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from transformers import AutoTokenizer

from actors.env_pool import EnvPool
from actors.evaluator import Evaluator
from actors.mcp_gateway import McpGateway
from actors.provisioners.bwrap import BwrapProvisioner
from actors.provisioners.local import LocalProvisioner
from actors.rollout import RolloutPipeline, env_config_resolver
from policies.batch import demonstration_samples, rl_samples
from policies.react import EpisodeLimits
from policies.scripted import ScriptedEngine
from policies.tokens import ChatRecorder
from policies.types import SamplingConfig
from specs.domains.calculator.expert import respond
from specs.servers import load_server_registry
from specs.task import load_tasks

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parent.parent
DOMAIN = REPO / "specs" / "domains" / "calculator"


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Any:
    return AutoTokenizer.from_pretrained(model_dir)


def wrong_once(task: Any, conversation: str) -> str:
    """An expert that answers one more than the tool said: scored, but never successful."""
    reply = respond(task, conversation)
    if "The answer is" in reply:
        return "The answer is -1."
    return reply


async def run_pipeline(
    tmp_path: Path,
    tokenizer: Any,
    tasks: list[Any],
    group_size: int,
    policy: Any = respond,
    *,
    evaluator: Any = None,
    servers: Path = DOMAIN / "servers.json",
    backend: str = "local",
) -> tuple[list[Any], RolloutPipeline, EnvPool]:
    provisioner = (
        BwrapProvisioner(tmp_path / "envs") if backend == "bwrap" else LocalProvisioner(tmp_path / "envs")
    )
    pool = EnvPool(provisioner, "test-run", max_live=3)
    async with McpGateway.running() as gateway:
        pipeline = RolloutPipeline(
            pool=pool,
            gateway=gateway,
            evaluator=evaluator or Evaluator(("specs.domains.calculator.hooks",)),
            env_config_for=env_config_resolver(load_server_registry(servers)),
            engine_for=lambda task: ScriptedEngine(tokenizer, policy, task),
            recorder_factory=lambda: ChatRecorder(tokenizer),
            acquire_workers=1,
            run_workers=3,
            eval_workers=1,
        )
        with anyio.fail_after(120):
            groups = await pipeline.collect(
                tasks, group_size, SamplingConfig(temperature=0.0), EpisodeLimits()
            )
    await pool.shutdown()
    return groups, pipeline, pool


@pytest.mark.parametrize(
    "backend",
    [
        "local",
        pytest.param("bwrap", marks=pytest.mark.skipif(not shutil.which("bwrap"), reason="needs bubblewrap")),
    ],
)
async def test_expert_groups_run_end_to_end_and_score_one(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    monkeypatch.chdir(REPO)
    tasks = load_tasks(DOMAIN / "tasks" / "train.json")[:2]
    groups, pipeline, pool = await run_pipeline(tmp_path, tokenizer, tasks, group_size=2, backend=backend)
    assert sorted(g.task_id for g in groups) == sorted(t.instance_id for t in tasks)
    trajectories = [t for g in groups for t in g.trajectories]
    assert all(g.dropped is None for g in groups)
    assert [t.reward for t in trajectories] == [1.0] * 4
    expected = {t.instance_id: t.private["_answer"] for t in tasks}
    for t in trajectories:
        assert [c.ok for c in t.tool_calls] == [True]
        assert f"{expected[t.task_id]:g}" in (t.final_answer or "")
    assert len(demonstration_samples(trajectories)) == 4
    assert rl_samples([g.trajectories for g in groups]) == []  # all equal rewards: no signal
    m = pipeline.metrics
    assert m.max_live_envs <= 3 and m.episodes == 4 and m.evaluated == 4
    assert m.acquire_s > 0 and m.run_s > 0 and m.evaluate_s > 0 and m.release_s > 0
    assert m.acquire_wait_s > 0  # one acquire worker for four trajectories: they queued
    stats = pool.stats()
    assert stats["live"] == 0 and stats["reused"] >= 1  # environments were reset and reused


async def test_wrong_answers_are_scored_zero_not_dropped(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    tasks = load_tasks(DOMAIN / "tasks" / "train.json")[:1]
    groups, _, _ = await run_pipeline(tmp_path, tokenizer, tasks, group_size=2, policy=wrong_once)
    assert [t.reward for t in groups[0].trajectories] == [0.0, 0.0]
    verdict = groups[0].trajectories[0].reward_details["evaluators"][0]
    assert verdict["passed"] is False and verdict["reason"]


class CrashingEvaluator:
    async def evaluate(self, task: Any, trajectory: Any, env: Any) -> tuple[float, dict[str, Any]]:
        from specs.errors import EvaluatorError

        raise EvaluatorError("the database the evaluator reads is gone")


async def test_a_crashing_evaluator_drops_the_whole_group_and_counts_it(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    tasks = load_tasks(DOMAIN / "tasks" / "train.json")[:1]
    groups, pipeline, _ = await run_pipeline(tmp_path, tokenizer, tasks, 2, evaluator=CrashingEvaluator())
    assert groups[0].dropped == "eval_failed"
    assert all(t.reward is None for t in groups[0].trajectories)
    assert pipeline.metrics.lost == {"eval_failed": 2} and pipeline.metrics.groups_dropped == 1


async def test_a_server_that_cannot_start_fails_the_trajectory_not_the_step(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    registry = tmp_path / "servers.json"
    registry.write_text(
        json.dumps(
            {
                "calculator": {
                    "stdio": {
                        "command": ".cache/servers/calculator/bin/python",
                        "args": ["-m", "mcp_server_calculator"],
                    }
                },
                "dead": {"stdio": {"command": "sh", "args": ["-c", "echo 'no such database' >&2; exit 3"]}},
            }
        )
    )
    task = load_tasks(DOMAIN / "tasks" / "train.json")[0]
    broken = msgspec.structs.replace(
        task, instance_id="broken", mcp_servers=(msgspec.structs.replace(task.mcp_servers[0], name="dead"),)
    )
    groups, pipeline, pool = await run_pipeline(tmp_path, tokenizer, [broken, task], 1, servers=registry)
    by_task = {g.task_id: g for g in groups}
    assert (
        by_task[task.instance_id].dropped is None and by_task[task.instance_id].trajectories[0].reward == 1.0
    )
    assert by_task["broken"].dropped == "infra_failed"
    assert "no such database" in (by_task["broken"].trajectories[0].error or "")
    assert pipeline.metrics.lost == {"infra_failed": 1} and pool.stats()["live"] == 0
