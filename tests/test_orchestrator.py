"""The step orchestrator: staleness bound, backpressure, order, and placement-independent content."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from transformers import AutoTokenizer

from actors.env_pool import EnvPool
from actors.evaluator import Evaluator
from actors.groups import Group, StageMetrics
from actors.mcp_gateway import McpGateway
from actors.orchestrator import StepOrchestrator, StepRollout
from actors.rollout import RolloutPipeline, env_config_resolver
from launch.tasks import TaskStream
from policies.react import EpisodeLimits
from policies.scripted import ScriptedEngine
from policies.tokens import ChatRecorder
from policies.types import SamplingConfig
from specs.domains.calculator.expert import respond
from specs.servers import load_server_registry
from specs.task import load_tasks
from specs.trajectory import Trajectory
from tests.backends import gone, make_backend, run_id

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parents[1]
DOMAIN = REPO / "specs" / "domains" / "calculator"


class Served:
    """The policy version the generator serves: bumped when a trained step's weights are published."""

    def __init__(self) -> None:
        self.version = 0

    async def get(self) -> int:
        return self.version


class TimedPipeline:
    """The ``RolloutPipeline`` interface the orchestrator uses: each group's turns are sampled at
    the served version read at the start of each (simulated, randomly slow) turn."""

    def __init__(self, served: Served, rng: random.Random, log: list[tuple[str, int]], step: int) -> None:
        self.served, self.rng, self.log, self.step = served, rng, log, step
        self.metrics = StageMetrics()

    async def stream(
        self, tasks: Sequence[Any], group_size: int, sampling: Any, limits: Any
    ) -> AsyncIterator[Group]:
        self.log.append(("start", self.step))
        for task in tasks:
            trajectories = []
            for _ in range(group_size):
                versions = []
                for _turn in range(2):
                    versions.append(self.served.version)
                    await anyio.sleep(self.rng.random() * 0.002)
                trajectories.append(
                    Trajectory(
                        task_id=task,
                        group_id=f"{self.step}/{task}",
                        token_ids=[1],
                        trainable=[1],
                        logprobs=[0.0],
                        versions=versions,
                        messages=[],
                    )
                )
            yield Group(task_id=task, group_id=f"{self.step}/{task}", trajectories=trajectories)
        self.log.append(("produced", self.step))


async def run_steps(
    max_staleness: int, steps: int, seed: int = 0, updates_per_step: int = 1
) -> tuple[list[tuple[str, int]], list[int]]:
    """Drive ``steps`` steps like launch/steps.py: train (``updates_per_step`` optimizer updates,
    each a version), publish, then ``completed``. Returns the event log and the staleness of every
    trained turn, in published policies."""
    served, rng, log = Served(), random.Random(seed), []
    stream = TaskStream([f"task{i}" for i in range(5)], seed=seed)
    made: list[int] = []

    def pipeline() -> Any:
        made.append(len(made) + 1)
        return TimedPipeline(served, rng, log, len(made))

    orchestrator = StepOrchestrator(
        pipeline=pipeline,
        draw=lambda step: stream.take(2),
        position=lambda: stream.position,
        version=served.get,
        group_size=2,
        sampling=None,
        limits=None,
        max_staleness=max_staleness,
    )
    staleness: list[int] = []
    with anyio.fail_after(30):
        async with orchestrator.run(1, steps) as rollouts:
            async for rollout in rollouts:
                assert orchestrator.drop_stale(rollout) == 0
                staleness += [
                    orchestrator.staleness(v)
                    for g in rollout.groups
                    for t in g.trajectories
                    for v in t.versions
                ]
                log.append(("train", rollout.step))
                await anyio.sleep(rng.random() * 0.004)  # the update
                served.version += updates_per_step  # publish
                orchestrator.completed(rollout.step, served.version)
    return log, staleness


@pytest.mark.parametrize("updates_per_step", [1, 3])
@pytest.mark.parametrize("max_staleness", [0, 1, 2])
async def test_the_staleness_bound_is_never_exceeded_and_backpressure_caps_untrained_steps(
    max_staleness: int, updates_per_step: int
) -> None:
    """Whatever ``learner.epochs_per_step`` (updates per step): staleness counts published
    policies, so the gate's bound holds and no group is dropped as stale."""
    for seed in range(5):
        log, staleness = await run_steps(max_staleness, steps=6, seed=seed, updates_per_step=updates_per_step)
        assert staleness and max(staleness) <= max_staleness
        # Backpressure: a step starts only when at most S steps are untrained before it.
        trained = 0
        for event, step in log:
            if event == "train":
                trained = step
            elif event == "start":
                assert step - 1 - trained <= max_staleness, (event, step, trained)


async def test_colocated_alternates_and_async_overlaps_one_step() -> None:
    log, _ = await run_steps(0, steps=3)
    order = [(e, s) for e, s in log if e in ("start", "train")]
    assert order == [("start", 1), ("train", 1), ("start", 2), ("train", 2), ("start", 3), ("train", 3)]
    log, staleness = await run_steps(1, steps=3)
    assert log.index(("start", 2)) < log.index(("train", 1))  # step 2 samples while step 1 trains
    assert log.index(("start", 3)) > log.index(("train", 1))
    assert max(staleness) == 1  # really off-policy by one version somewhere


async def test_a_turn_older_than_the_bound_drops_its_group_and_is_counted() -> None:
    def group(name: str, versions: list[int]) -> Group:
        t = Trajectory(
            task_id=name,
            group_id=name,
            token_ids=[],
            trainable=[],
            logprobs=[],
            versions=versions,
            messages=[],
        )
        return Group(task_id=name, group_id=name, trajectories=[t, t])

    orchestrator = idle_orchestrator(max_staleness=1)
    for step, version in ((1, 2), (2, 4), (3, 4)):  # two updates a step; step 3 had nothing to train
        orchestrator.completed(step, version)
    assert [orchestrator.staleness(v) for v in (0, 2, 3, 4)] == [2, 1, 1, 0]
    pipeline: Any = TimedPipeline(Served(), random.Random(0), [], 1)
    rollout = StepRollout(
        step=5,
        groups=[group("fresh", [2, 4]), group("old", [0, 4])],
        position=0,
        started_version=2,
        rollout_s=1.0,
        waited_s=0.0,
        pipeline=pipeline,
    )
    assert orchestrator.drop_stale(rollout) == 1
    assert [g.dropped for g in rollout.groups] == [None, "stale"]
    assert pipeline.metrics.lost == {"stale": 1} and orchestrator.stale_dropped == 1


def idle_orchestrator(max_staleness: int) -> StepOrchestrator:
    """An orchestrator that is never run: for its checks alone."""
    return StepOrchestrator(
        pipeline=lambda: None,  # type: ignore[arg-type,return-value]
        draw=lambda step: [],
        position=lambda: 0,
        version=Served().get,
        group_size=2,
        sampling=None,
        limits=None,
        max_staleness=max_staleness,
    )


async def test_a_bad_staleness_or_out_of_order_completion_is_refused() -> None:
    with pytest.raises(ValueError, match="max_staleness must be >= 0"):
        idle_orchestrator(max_staleness=-1)
    orchestrator = idle_orchestrator(max_staleness=1)
    orchestrator.completed(1, version=1)
    with pytest.raises(ValueError, match=r"completed\(3\) out of order: step 1 was the last one"):
        orchestrator.completed(3, version=2)


# -- the real pipeline: placement changes no trajectory content -----------------------------------


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Any:
    return AutoTokenizer.from_pretrained(model_dir)


async def real_steps(
    pool: EnvPool, tokenizer: Any, max_staleness: int, steps: int, fail_at: int | None = None
) -> list[list[tuple[str, list[int]]]]:
    """``steps`` steps of the calculator expert through the real pool, gateway and evaluator; per
    step, the sorted (task, token ids) of its trajectories. ``fail_at``: the learner dies there."""
    tasks = load_tasks(DOMAIN / "tasks" / "train.json")[:6]
    stream = TaskStream(tasks, seed=3)
    served = Served()
    contents: list[list[tuple[str, list[int]]]] = []
    async with McpGateway.running() as gateway:

        def pipeline() -> RolloutPipeline:
            return RolloutPipeline(
                pool=pool,
                gateway=gateway,
                evaluator=Evaluator(("specs.domains.calculator.hooks",)),
                env_config_for=env_config_resolver(load_server_registry(DOMAIN / "servers.json")),
                engine_for=lambda task: ScriptedEngine(tokenizer, respond, task, version=served.version),
                recorder_factory=lambda: ChatRecorder(tokenizer),
                acquire_workers=1,
                run_workers=2,
                eval_workers=1,
            )

        orchestrator = StepOrchestrator(
            pipeline=pipeline,
            draw=lambda step: stream.take(2),
            position=lambda: stream.position,
            version=served.get,
            group_size=2,
            sampling=SamplingConfig(temperature=0.0),
            limits=EpisodeLimits(),
            max_staleness=max_staleness,
        )
        try:
            with anyio.fail_after(120):
                async with orchestrator.run(1, steps) as rollouts:
                    async for rollout in rollouts:
                        if rollout.step == fail_at:
                            raise RuntimeError("learner died")
                        contents.append(
                            sorted((t.task_id, t.token_ids) for g in rollout.groups for t in g.trajectories)
                        )
                        served.version += 1
                        orchestrator.completed(rollout.step, served.version)
        finally:
            await pool.shutdown()
    return contents


async def test_switching_placement_changes_no_trajectory_content(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    colocated = await real_steps(
        EnvPool(make_backend("local", tmp_path / "c"), run_id(), max_live=4), tokenizer, 0, steps=3
    )
    asynchronous = await real_steps(
        EnvPool(make_backend("local", tmp_path / "a"), run_id(), max_live=4), tokenizer, 1, steps=3
    )
    assert len(colocated) == 3 and colocated == asynchronous


async def test_a_learner_that_dies_takes_the_run_down_with_no_environment_left(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    rid, provisioner = run_id(), make_backend("local", tmp_path)
    pool = EnvPool(provisioner, rid, max_live=4)
    created: list[str] = []
    original = provisioner.create

    async def remember(*args: Any, **kwargs: Any) -> Any:
        env = await original(*args, **kwargs)
        created.append(env.env_id)
        return env

    monkeypatch.setattr(provisioner, "create", remember)
    with pytest.raises(RuntimeError, match="learner died"):
        # The producer is sampling step 3 when step 2 fails: it is cancelled, its envs released.
        await real_steps(pool, tokenizer, max_staleness=1, steps=4, fail_at=2)
    assert created and pool.stats()["live"] == 0
    assert await provisioner.list_owned(rid) == []
    for env_id in created:
        assert await gone(env_id)
