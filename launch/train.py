"""Train an MCP tool-use agent with GRPO: the one training entry point.

    python launch/train.py [--config FILE] [key.path=value ...]
    ray job submit --working-dir . -- python launch/train.py --config FILE

It reads top to bottom. Parse the config (no ML import before that, so a bad config or ``--help``
answers at once); start Ray (in-process, or the cluster named by ``ray.address`` / ``RAY_ADDRESS``)
and the actors; measure the base policy greedily on the eval split; warm-start on expert
demonstrations that ran through the very same pipeline (environments, gateway, token recording);
then RL steps through the orchestrator (``actors/orchestrator.py``: colocated alternates, async
samples the next step while this one trains): each step's groups are scored, normalised within
each group, trained on, and the new weights go to the generator; step checkpoints on a schedule
(``train.resume`` continues from one); measure again; shut everything down in ``finally``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import time
import typing
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from specs.config import RunConfig, load_run_config  # noqa: E402  (no ML imports)
from specs.errors import SpecError  # noqa: E402


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", help="run config YAML (default: the embedded CPU demo)")
    parser.add_argument("overrides", nargs="*", help="config overrides, key.path=value")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = load_run_config(args.config, args.overrides)
        import anyio

        return anyio.run(train, cfg)
    except SpecError as e:  # a malformed config, task file or server list: say where, train nothing
        print(f"spec error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # train() has already destroyed every environment and actor
        print("interrupted: environments and actors shut down", file=sys.stderr)
        return 130


class TaskStream:
    """Training tasks in a seeded order, reshuffled each pass; ``position`` counts tasks drawn.
    ``keep`` (gradient-band curation) skips tasks it refuses, in the same order."""

    def __init__(self, tasks: Sequence[Any], seed: int) -> None:
        self.tasks, self._seed, self.position = list(tasks), seed, 0

    def take(self, n: int, keep: Callable[[Any], bool] | None = None) -> list[Any]:
        out: list[Any] = []
        skipped = 0
        while len(out) < n:
            epoch, index = divmod(self.position, len(self.tasks))
            order = list(range(len(self.tasks)))
            random.Random(self._seed * 1_000_003 + epoch).shuffle(order)
            task = self.tasks[order[index]]
            self.position += 1
            if keep is None or keep(task):
                out.append(task)
                skipped = 0
            elif (skipped := skipped + 1) >= len(self.tasks):
                raise RuntimeError("curation left no training task inside its pass-rate band")
        return out


async def train(cfg: RunConfig) -> int:
    import msgspec
    import ray
    from transformers import AutoTokenizer

    from actors.orchestrator import StepOrchestrator
    from actors.placement import publish_weights, start_actors, stop_actors, training_phase
    from actors.rollout import RolloutPipeline, env_config_resolver
    from launch.checkpoints import read_progress, resolve_resume
    from launch.episodes import (
        drop_unreplayable,
        episode_limits,
        episode_recorder,
        make_pipeline,
        step_samples,
    )
    from launch.report import Reporter
    from policies.batch import demonstration_samples
    from policies.metrics import episode_metrics
    from policies.scripted import ScriptedEngine
    from policies.types import SamplingConfig
    from rewards.adoption import PassRateCurator
    from rewards.reasoning_reward import ReasoningScorer
    from specs.check import check_task_semantics
    from specs.errors import raise_all
    from specs.registry import resolve_import
    from specs.servers import load_server_registry
    from specs.task import load_tasks

    run_id = f"{cfg.run_name}-{uuid.uuid4().hex[:6]}"
    train_tasks = TaskStream(load_tasks(cfg.domain.tasks)[: cfg.train.curation_pool], cfg.seed)
    eval_tasks = load_tasks(cfg.domain.eval_tasks)[: cfg.train.eval_tasks_limit]
    registry = load_server_registry(cfg.domain.servers)
    # Refuse now, not mid-run: unknown servers, ops or hooks, and unset {{VAR}}s.
    for file, tasks in ((cfg.domain.tasks, train_tasks.tasks), (cfg.domain.eval_tasks, eval_tasks)):
        raise_all(check_task_semantics(tasks, file, registry, cfg.domain.hook_modules)[0])
    env_config_for = env_config_resolver(registry, cfg.env)
    configs = {(c := env_config_for(task)).key(): c for task in [*train_tasks.tasks, *eval_tasks]}
    uses = Counter(env_config_for(task).key() for task in train_tasks.tasks)
    expert = resolve_import(cfg.domain.expert) if cfg.warmstart.enabled and cfg.domain.expert else None
    tokenizer = AutoTokenizer.from_pretrained(cfg.model.path)
    stop_ids = (tokenizer.eos_token_id,)

    owns_ray = not ray.is_initialized()
    if owns_ray:
        ray.init(address=cfg.ray.address, num_cpus=cfg.ray.num_cpus, log_to_driver=True)
    cleanup = contextlib.AsyncExitStack()
    try:
        reporter = Reporter(cfg, run_id)
        cleanup.callback(reporter.close)
        actors = start_actors(cfg, run_id, control_tokens=tokenizer.all_special_tokens)
        cleanup.push_async_callback(stop_actors, actors)
        print(
            f"run {run_id}: {cfg.domain.name} domain, model {cfg.model.path}, output {cfg.run_dir}",
            flush=True,
        )
        await actors.pool.reap_leftovers()
        if cfg.env.prewarm:
            for key, n in uses.items():
                if n > 1:  # a configuration of its own task only is created on demand
                    warmed = await actors.pool.prewarm(configs[key], cfg.env.prewarm)
                    print(f"prewarmed {warmed} {cfg.env.backend} environment(s) for {n} tasks", flush=True)

        def pipeline(engine_for: Any) -> RolloutPipeline:
            return make_pipeline(cfg, actors, tokenizer, env_config_for, engine_for)

        limits = episode_limits(cfg)
        scorer = None
        if cfg.algorithm.reasoning_reward:  # RunConfig refuses it without a reasoning format
            scorer = ReasoningScorer(fmt=typing.cast(Any, cfg.rollout.reasoning_format))
        instructions = {t.instance_id: t.instruction for t in train_tasks.tasks}
        references = {t.instance_id: t.reference_calls for t in train_tasks.tasks}
        eval_limits = msgspec.structs.replace(limits, max_turns=cfg.eval_max_turns)
        greedy = SamplingConfig(temperature=0.0, stop_token_ids=stop_ids)
        sampling = SamplingConfig(
            temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, stop_token_ids=stop_ids
        )

        async def evaluate(phase: str, step: int) -> dict[str, float]:
            with reporter.progress(f"eval {phase}", len(eval_tasks)) as advance:
                groups = await pipeline(lambda task: actors.generator).collect(
                    eval_tasks, 1, greedy, eval_limits, advance
                )
            trajectories = [t for g in groups for t in g.trajectories]
            reporter.write_trajectories(f"eval_{phase}", trajectories, tokenizer)
            lost = [t.status for t in trajectories if t.status != "ok"]
            # A lost eval episode is a failure of the run, not of the policy: reported, not hidden.
            metrics = {**episode_metrics(trajectories), "lost": float(len(lost))}
            reporter.log(f"eval/{phase}", step, metrics)
            return metrics

        resume = resolve_resume(cfg.train.resume, cfg.checkpoint_dir)
        results: dict[str, dict[str, float]] = {}
        if resume is None:
            results["base"] = await evaluate("base", 0)

        if expert is not None and resume is None:
            started = time.perf_counter()
            with reporter.progress("expert demonstrations", cfg.warmstart.demonstrations) as advance:
                demo_groups = await pipeline(lambda task: ScriptedEngine(tokenizer, expert, task)).collect(
                    train_tasks.take(cfg.warmstart.demonstrations), 1, greedy, limits, advance
                )
            demos = demonstration_samples(t for g in demo_groups for t in g.trajectories)
            reporter.write_trajectories(
                "demonstrations", [t for g in demo_groups for t in g.trajectories], tokenizer
            )
            if not demos:
                raise RuntimeError("warm start: the expert produced no successful demonstration")
            rng = random.Random(cfg.seed)
            batch = cfg.warmstart.batch_size
            async with training_phase(actors):
                for epoch in range(cfg.warmstart.epochs):
                    rng.shuffle(demos)
                    with reporter.progress(f"warm start epoch {epoch + 1}", len(demos)) as advance:
                        for i in range(0, len(demos), batch):
                            stats = await actors.learner.sft_step(demos[i : i + batch], cfg.warmstart.lr)
                            advance(n=len(demos[i : i + batch]))
                    update_s = time.perf_counter() - started
                    reporter.log("warmstart", epoch + 1, {"loss": stats["loss"], "update_s": update_s})
            await publish_weights(actors)
            results["warmstart"] = await evaluate("warmstart", 0)

        curator = None
        if cfg.train.curation_samples:
            curator = PassRateCurator(
                band=cfg.train.curation_band,
                samples=cfg.train.curation_samples,
                reprofile_every=cfg.train.curation_every,
            )

        first_step = 1
        if resume is not None:  # the learner, the policy served, the task stream and curation
            progress = read_progress(resume)
            await actors.learner.load_checkpoint(resume)
            await publish_weights(actors)
            train_tasks.position = progress.position
            if curator is not None and progress.curation is not None:
                curator.load_state_dict(progress.curation)
            first_step = progress.step + 1
            print(
                f"resumed from {resume}: step {progress.step} done, policy version {progress.version}, "
                f"task position {progress.position}",
                flush=True,
            )

        async def profile(step: int) -> None:
            """Gradient-band curation: each task's pass rate over G sampled episodes."""
            assert curator is not None
            with reporter.progress("curation profile", len(train_tasks.tasks)) as advance:
                profiled = await pipeline(lambda task: actors.generator).collect(
                    train_tasks.tasks, cfg.train.curation_samples, sampling, limits, advance
                )
            for group in profiled:
                outcomes = [
                    t.reward is not None and t.reward >= 1.0 for t in group.trajectories if t.status == "ok"
                ]
                if len(outcomes) == cfg.train.curation_samples:  # a group that lost a member says nothing
                    curator.update(group.task_id, outcomes)
            kept = curator.trainable([t.instance_id for t in train_tasks.tasks])
            reporter.log("curation", step, {"tasks": float(len(train_tasks.tasks)), "kept": float(len(kept))})
            band = cfg.train.curation_band
            print(
                f"curation: {len(kept)} of {len(train_tasks.tasks)} tasks have a pass rate in {band}",
                flush=True,
            )

        def curated(task: Any) -> bool:
            return curator is None or bool(curator.trainable([task.instance_id]))

        async def prepare(step: int) -> None:  # before a step's tasks are drawn
            if curator is not None and curator.due(step - 1):
                await profile(step)

        steps = max(cfg.train.steps - first_step + 1, 0)
        with reporter.progress("rollout groups", steps * cfg.rollout.tasks_per_step) as advance:
            orchestrator = StepOrchestrator(
                pipeline=lambda: pipeline(lambda task: actors.generator),
                draw=lambda step: train_tasks.take(cfg.rollout.tasks_per_step, keep=curated),
                position=lambda: train_tasks.position,
                version=actors.generator.get_version,
                group_size=cfg.rollout.group_size,
                sampling=sampling,
                limits=limits,
                max_staleness=cfg.staleness,
                prepare=prepare,
                on_group=lambda step, group: advance(),
            )
            last = time.perf_counter()
            async with orchestrator.run(first_step, cfg.train.steps) as rollouts:
                async for rollout in rollouts:
                    step = rollout.step
                    await actors.pool.sweep()  # past their time-to-live, or left by dead owners
                    groups, m = rollout.groups, rollout.pipeline.metrics
                    trajectories = [t for g in groups for t in g.trajectories]
                    reporter.write_trajectories(f"step_{step:04d}", trajectories, tokenizer)
                    learner_version = await actors.learner.get_version()
                    orchestrator.drop_stale(rollout, learner_version)
                    if cfg.rollout.observation_rule is not None:  # train only on contexts the log rebuilds
                        for _ in range(drop_unreplayable(groups, lambda: episode_recorder(cfg, tokenizer))):
                            m.lose("replay_mismatch")
                    complete = [g.trajectories for g in groups if g.dropped is None]
                    if not complete:  # systemic, not one bad trajectory: stop rather than train on nothing
                        raise RuntimeError(f"step {step}: every group was lost ({m.lost}); see the log above")
                    samples, families = step_samples(
                        cfg, complete, scorer=scorer, instructions=instructions, references=references
                    )
                    started = time.perf_counter()
                    update: dict[str, float] = {}
                    async with training_phase(actors):  # colocated on a GPU: the engine sleeps
                        for _ in range(cfg.learner.epochs_per_step if samples else 0):
                            update = await actors.learner.train_step(samples)
                    update_s = time.perf_counter() - started
                    started = time.perf_counter()
                    if samples:
                        await publish_weights(actors)
                    sync_s = time.perf_counter() - started
                    orchestrator.completed(step)  # the next steps may start sampling
                    versions = [v for ts in complete for t in ts for v in t.versions]
                    now = time.perf_counter()
                    metrics = {
                        **episode_metrics([t for g in complete for t in g]),
                        **families,
                        **{k: float(v) for k, v in update.items()},
                        "samples": float(len(samples)),
                        "gen_tok_s": sum(t.num_generated_tokens for t in trajectories) / rollout.rollout_s,
                        "step_s": now - last,
                        "rollout_s": rollout.rollout_s,
                        "gate_wait_s": rollout.waited_s,
                        "update_s": update_s,
                        "sync_s": sync_s,
                        "staleness_max": float(learner_version - min(versions, default=learner_version)),
                        **m.as_metrics(),
                    }
                    last = now
                    if cfg.train.checkpoint_every and step % cfg.train.checkpoint_every == 0:
                        await save_step_checkpoint(actors, cfg, step, rollout.position, curator, run_id)
                    # Logged after the checkpoint: a resumed run logs each step once.
                    reporter.log("train", step, metrics)
                    if cfg.train.eval_every and step % cfg.train.eval_every == 0 and step < cfg.train.steps:
                        await evaluate(f"step{step}", step)

        results["final"] = await evaluate("final", cfg.train.steps)
        await actors.learner.save_checkpoint(cfg.checkpoint_dir)
        reporter.summary({f"{phase}/{k}": v for phase, m in results.items() for k, v in m.items()})
        print(_summary_line(results), flush=True)
        return 0
    finally:
        await cleanup.aclose()
        if owns_ray:
            ray.shutdown()


def _summary_line(results: dict[str, dict[str, float]]) -> str:
    parts = [
        f"{phase}_{key}={m.get(key, float('nan')):.2f}"
        for phase, m in results.items()
        for key in ("success", "valid_call")
    ]
    return "train: " + " ".join(parts)


async def save_step_checkpoint(
    actors: Any, cfg: RunConfig, step: int, position: int, curator: Any, run_id: str
) -> str:
    """``<checkpoint_dir>/step-NNNN``: the learner's state, then ``progress.json`` (which makes the
    checkpoint complete); older step checkpoints beyond ``train.keep_checkpoints`` are removed."""
    from launch.checkpoints import Progress, prune, step_dir, write_progress

    directory = step_dir(cfg.checkpoint_dir, step)
    await actors.learner.save_checkpoint(directory)
    progress = Progress(
        step=step,
        version=await actors.learner.get_version(),
        position=position,
        curation=curator.state_dict() if curator is not None else None,
        run_id=run_id,
    )
    write_progress(directory, progress)
    prune(cfg.checkpoint_dir, cfg.train.keep_checkpoints)
    return directory


if __name__ == "__main__":
    sys.exit(main())
