"""The whole rollout pipeline with a scripted policy: real pool, gateway, calculator server, evaluator.

The scripted engine implements the Engine protocol (token ids in, token ids out), so everything
below it is the production path: local environments, MCP sessions to the third-party calculator
over stdio, token-exact recording, MCP-Universe evaluators against the live environment.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from transformers import AutoTokenizer

from actors.env_front import NodeLost
from actors.env_pool import EnvPool
from actors.errors import EnvError, InfraError, loss_cause
from actors.evaluator import Evaluator
from actors.groups import StageMetrics
from actors.mcp_gateway import McpGateway
from actors.provisioners.local import kill_marked_processes
from actors.rollout import RolloutPipeline, env_config_resolver
from policies.batch import demonstration_samples, rl_samples
from policies.react import DEFAULT_SYSTEM_PROMPT, EpisodeLimits
from policies.scripted import ScriptedEngine
from policies.thought import THINK_INSTRUCTIONS
from policies.tokens import ChatRecorder
from policies.types import SamplingConfig
from specs.domains.calculator.expert import respond
from specs.servers import load_server_registry
from specs.task import load_tasks
from specs.trajectory import Score
from tests.backends import BACKENDS, make_backend, run_id

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
    reasoning_format: Any = "none",
    system_prompt: str | None = None,
    retries: int = 0,
    group_timeout_s: float | None = None,
    limits: EpisodeLimits | None = None,
    gateway: McpGateway | None = None,
) -> tuple[list[Any], RolloutPipeline, EnvPool]:
    """``gateway``: the caller's (to read its stats); else one of its own for the batch."""
    pool = EnvPool(make_backend(backend, tmp_path / "envs"), run_id(), max_live=3)
    async with contextlib.AsyncExitStack() as stack:
        if gateway is None:
            gateway = await stack.enter_async_context(McpGateway.running())
        pipeline = RolloutPipeline(
            pool=pool,
            gateway=gateway,
            evaluator=evaluator or Evaluator(("specs.domains.calculator.hooks",)),
            env_config_for=env_config_resolver(load_server_registry(servers)),
            engine_for=lambda task: ScriptedEngine(tokenizer, policy, task),
            recorder_factory=lambda: ChatRecorder(tokenizer, reasoning_format=reasoning_format),
            system_prompt=system_prompt,
            acquire_workers=1,
            run_workers=3,
            eval_workers=1,
            retries=retries,
            group_timeout_s=group_timeout_s,
        )
        with anyio.fail_after(120):
            groups = await pipeline.collect(
                tasks, group_size, SamplingConfig(temperature=0.0), limits or EpisodeLimits()
            )
    await pool.shutdown()
    return groups, pipeline, pool


@pytest.mark.parametrize("backend", BACKENDS)
async def test_expert_groups_run_end_to_end_and_score_one(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    monkeypatch.chdir(REPO)
    tasks = load_tasks(DOMAIN / "tasks" / "train.json")[:2]
    async with McpGateway.running() as gateway:
        groups, pipeline, pool = await run_pipeline(
            tmp_path, tokenizer, tasks, group_size=2, backend=backend, gateway=gateway
        )
        servers = gateway.stats()
    assert sorted(g.task_id for g in groups) == sorted(t.instance_id for t in tasks)
    trajectories = [t for g in groups for t in g.trajectories]
    assert all(g.dropped is None for g in groups)
    assert [t.succeeded for t in trajectories] == [True] * 4
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
    # The calculator is keep_alive: a reused env keeps its server, except where a reset restarts all.
    kept = 0 if backend == "docker" else stats["reused"]
    assert (servers["servers_kept"], servers["servers_started"]) == (kept, 4 - kept)


async def test_wrong_answers_are_scored_zero_not_dropped(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    tasks = load_tasks(DOMAIN / "tasks" / "train.json")[:1]
    groups, _, _ = await run_pipeline(tmp_path, tokenizer, tasks, group_size=2, policy=wrong_once)
    assert [t.succeeded for t in groups[0].trajectories] == [False, False]
    score = groups[0].trajectories[0].score
    assert score is not None
    verdict = score.verdicts[0]
    assert verdict.passed is False and verdict.message


class CrashingEvaluator:
    async def evaluate(self, task: Any, trajectory: Any, env: Any) -> Score:
        from specs.errors import EvaluatorError

        raise EvaluatorError("the database the evaluator reads is gone")


async def test_a_crashing_evaluator_drops_the_whole_group_and_counts_it(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    tasks = load_tasks(DOMAIN / "tasks" / "train.json")[:1]
    groups, pipeline, _ = await run_pipeline(tmp_path, tokenizer, tasks, 2, evaluator=CrashingEvaluator())
    assert groups[0].dropped == "eval_failed"
    assert all(t.score is None for t in groups[0].trajectories)
    assert pipeline.metrics.lost == {"eval_failed": 2} and pipeline.metrics.groups_dropped == 1


class EvaluatorOnALostNode:
    """Raises what ``EnvFront`` raises when the evaluated environment's node died, the first time."""

    def __init__(self) -> None:
        self.calls = 0
        self.inner = Evaluator(("specs.domains.calculator.hooks",))

    async def evaluate(self, task: Any, trajectory: Any, env: Any) -> Score:
        self.calls += 1
        if self.calls == 1:
            raise NodeLost("node n1 was lost: the actor died unexpectedly")
        return await self.inner.evaluate(task, trajectory, env)


async def test_an_environment_lost_under_the_evaluator_is_run_again_not_dropped(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Infrastructure, not the evaluator, failed: the trajectory is retried and its group kept."""
    monkeypatch.chdir(REPO)
    tasks = load_tasks(DOMAIN / "tasks" / "train.json")[:1]
    evaluator = EvaluatorOnALostNode()
    groups, pipeline, _ = await run_pipeline(tmp_path, tokenizer, tasks, 2, evaluator=evaluator, retries=1)
    assert groups[0].dropped is None and len(groups[0].trajectories) == 2
    assert all(t.score is not None for t in groups[0].trajectories)
    assert pipeline.metrics.lost == {"node_lost": 1} and pipeline.metrics.retried == 1


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
    assert by_task[task.instance_id].dropped is None and by_task[task.instance_id].trajectories[0].succeeded
    assert by_task["broken"].dropped == "infra_failed"
    assert "no such database" in (by_task["broken"].trajectories[0].error or "")
    assert pipeline.metrics.lost == {"infra_failed": 1} and pool.stats()["live"] == 0


def saboteur(pool_ref: list[EnvPool]) -> Any:
    """A policy for the edge server: task ``crash`` makes the server die mid-call; task ``vanish``
    reads its env id (``whereami``) and destroys the environment under the episode; other tasks
    behave as the calculator expert."""

    def policy(task: Any, conversation: str) -> str:
        after = conversation[conversation.rfind(task.instruction) + len(task.instruction) :]
        if task.instance_id == "crash":
            return '<tool_call>\n{"name": "edge__crash", "arguments": {}}\n</tool_call>'
        if task.instance_id == "vanish":
            if "<tool_response>" not in after:
                return '<tool_call>\n{"name": "edge__whereami", "arguments": {}}\n</tool_call>'
            if after.count("<tool_response>") == 1:
                cwd = json.loads(after.split("<tool_response>")[1].split("</tool_response>")[0])["cwd"]
                (pool,) = pool_ref
                (env,) = [env for env, _ in pool._held.values() if cwd == env.workdir]
                kill_marked_processes(env.env_id)  # the environment dies mid-episode: what a local
                shutil.rmtree(env.data["env_dir"])  # destroy does, from a policy that runs sync
                return '<tool_call>\n{"name": "edge__echo", "arguments": {"text": "anyone?"}}\n</tool_call>'
        return respond(task, conversation)

    return policy


async def test_a_server_or_env_dying_mid_episode_fails_that_trajectory_and_the_env_is_not_reused(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    registry = tmp_path / "servers.json"
    calculator = json.loads((DOMAIN / "servers.json").read_text())["calculator"]
    edge = {
        "stdio": {"command": sys.executable, "args": [str(REPO / "tests" / "servers" / "edge_server.py")]}
    }
    registry.write_text(json.dumps({"calculator": calculator, "edge": edge}))
    task = load_tasks(DOMAIN / "tasks" / "train.json")[0]
    on_edge = msgspec.structs.replace(task.mcp_servers[0], name="edge", tools=("crash", "whereami", "echo"))
    victims = [
        msgspec.structs.replace(task, instance_id=i, mcp_servers=(on_edge,)) for i in ("crash", "vanish")
    ]
    pool_ref: list[EnvPool] = []
    original = EnvPool.__init__

    def remember(self: EnvPool, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        pool_ref.append(self)

    monkeypatch.setattr(EnvPool, "__init__", remember)
    groups, pipeline, pool = await run_pipeline(
        tmp_path, tokenizer, [*victims, task], 1, policy=saboteur(pool_ref), servers=registry, retries=1
    )
    by_task = {g.task_id: g for g in groups}
    for victim in ("crash", "vanish"):
        (trajectory,) = by_task[victim].trajectories
        assert (trajectory.status, trajectory.score, by_task[victim].dropped) == (
            "infra_failed",
            None,
            "infra_failed",
        )
        assert "died" in (trajectory.error or ""), trajectory.error
    assert by_task[task.instance_id].trajectories[0].succeeded  # the step goes on
    # Each victim was retried once on a fresh environment, failed again, and its group dropped.
    assert pipeline.metrics.lost == {"infra_failed": 4} and pipeline.metrics.retried == 2
    stats = pool.stats()
    assert stats["broken"] == 4 and stats["reused"] == 0  # no broken env came back


def edge_task(tmp_path: Path, *tools: str) -> tuple[Path, Any]:
    """A server registry with the edge server, and a calculator task that may use only ``tools`` of it."""
    registry = tmp_path / "servers.json"
    edge = {
        "stdio": {"command": sys.executable, "args": [str(REPO / "tests" / "servers" / "edge_server.py")]}
    }
    registry.write_text(json.dumps({"edge": edge}))
    task = load_tasks(DOMAIN / "tasks" / "train.json")[0]
    on_edge = msgspec.structs.replace(task.mcp_servers[0], name="edge", tools=tools)
    return registry, msgspec.structs.replace(task, mcp_servers=(on_edge,))


async def test_a_trajectory_lost_to_a_dying_server_is_retried_on_a_fresh_env_and_its_group_completes(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    registry, task = edge_task(tmp_path, "crash", "echo")
    flaky = msgspec.structs.replace(task, instance_id="flaky")
    crashed: list[str] = []

    def crash_once(task: Any, conversation: str) -> str:
        after = conversation[conversation.rfind(task.instruction) + len(task.instruction) :]
        if "<tool_response>" in after:
            return f"The answer is {task.private['_answer']}."
        if not crashed:
            crashed.append("once")
            return '<tool_call>\n{"name": "edge__crash", "arguments": {}}\n</tool_call>'
        return '<tool_call>\n{"name": "edge__echo", "arguments": {"text": "hi"}}\n</tool_call>'

    groups, pipeline, pool = await run_pipeline(
        tmp_path, tokenizer, [flaky], 3, policy=crash_once, servers=registry, retries=1
    )
    (group,) = groups
    assert group.dropped is None and len(group.trajectories) == 3
    assert [t.succeeded for t in group.trajectories] == [True, True, True]
    assert pipeline.metrics.lost == {"infra_failed": 1} and pipeline.metrics.retried == 1
    assert pool.stats()["broken"] == 1 and pool.stats()["live"] == 0


async def test_a_lost_trajectory_is_counted_by_its_cause_when_ray_wraps_the_error_too() -> None:
    exceptions = pytest.importorskip("ray.exceptions")
    died = InfraError("MCP server 'bank' (command '/bin/sh') of env c52a41d75144 failed to start")
    gone = NodeLost("node worker-1 was lost")
    # what an actor's exception is on the caller's side: a RayTaskError subclass of its class
    from_actor = [exceptions.RayTaskError("open", "traceback", e).as_instanceof_cause() for e in (died, gone)]
    metrics = StageMetrics()
    for error in [died, gone, *from_actor, EnvError("the pool shut down")]:
        metrics.lose(loss_cause(error))
    lost = {k: v for k, v in metrics.as_metrics().items() if k.startswith("lost_")}
    assert lost == {"lost_infra_failed": 3.0, "lost_node_lost": 2.0}


async def test_a_thought_mdp_episode_records_reasoning_and_action_masks(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    tasks = load_tasks(DOMAIN / "tasks" / "train.json")[:1]
    prompt = f"{DEFAULT_SYSTEM_PROMPT} {THINK_INSTRUCTIONS}"
    groups, _, _ = await run_pipeline(
        tmp_path, tokenizer, tasks, 2, reasoning_format="think", system_prompt=prompt
    )
    for t in groups[0].trajectories:
        assert t.succeeded and t.num_reasoning_tokens > 0
        reasoning = tokenizer.decode([i for i, r in zip(t.token_ids, t.reasoning, strict=True) if r])
        assert reasoning.count("<think>") == reasoning.count("</think>") == 2  # one span per action
        action = tokenizer.decode([i for i, a in zip(t.token_ids, t.action, strict=True) if a])
        assert "<tool_call>" in action and "The answer is" in action and "<think>" not in action


async def test_a_group_past_its_deadline_is_dropped_whole_and_its_environments_released(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    registry, task = edge_task(
        tmp_path,
        "stall",
    )
    slow = msgspec.structs.replace(task, instance_id="slow")

    def stall(task: Any, conversation: str) -> str:
        return '<tool_call>\n{"name": "edge__stall", "arguments": {}}\n</tool_call>'

    groups, pipeline, pool = await run_pipeline(
        tmp_path,
        tokenizer,
        [slow],
        2,
        policy=stall,
        servers=registry,
        group_timeout_s=2.0,
        limits=EpisodeLimits(tool_timeout_s=60.0),
    )
    (group,) = groups
    assert group.dropped == "group_timeout" and pipeline.metrics.lost == {"group_timeout": 1}
    assert pool.stats()["live"] == 0


def test_a_tasks_image_is_the_docker_backends_and_left_out_elsewhere() -> None:
    from specs.env_config import EnvPoolConfig
    from specs.task import TaskSpec

    task = TaskSpec(instance_id="t", instruction="x", dockerfile_path="d/Dockerfile", build_args={"P": "1"})
    registry = load_server_registry(DOMAIN / "servers.json")
    docker = env_config_resolver(registry, EnvPoolConfig(backend="docker"))(task)
    assert (docker.dockerfile_path, docker.build_args) == ("d/Dockerfile", {"P": "1"})
    for backend in ("local", "bwrap"):
        other = env_config_resolver(registry, EnvPoolConfig(backend=backend))(task)  # type: ignore[arg-type]
        assert (other.dockerfile_path, other.build_args) == (None, {})
    from specs.env_config import EnvNodeGroup

    mixed = EnvPoolConfig(
        backend="bwrap", node_resource="e", node_groups={"d": EnvNodeGroup(backend="docker")}
    )
    kept = env_config_resolver(registry, mixed)(task)  # the front leaves it out on the bwrap nodes
    assert (kept.dockerfile_path, kept.build_args) == ("d/Dockerfile", {"P": "1"})
    assert kept.for_backend("bwrap") == other.for_backend("docker") == other
