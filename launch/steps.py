"""The RL steps: sample groups through the orchestrator, train on the complete ones, publish.

``run_steps`` drives ``actors.orchestrator.StepOrchestrator`` (colocated alternates; async samples
step s+1 while step s trains, within ``max_staleness``) and, for each step in order, calls
``train_step``: drop stale groups and groups whose logged observation rule does not rebuild their
tokens, turn the complete groups' typed scores into learner samples (``step_samples``), update at
the step's learning rate (``learner.lr_at``), publish the weights, and return the step's metrics.
Checkpoints and mid-run evaluations follow the ``train`` schedule; env nodes that came up join the
run between steps (``Session.join_env_nodes``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from actors.generator import engine_use
from actors.groups import Group
from actors.orchestrator import StepOrchestrator, StepRollout
from actors.placement import publish_weights, training_phase
from launch.checkpoints import Progress, prune, step_dir, write_progress
from launch.phases import evaluate
from launch.session import Session
from launch.tasks import CuratedTasks
from policies.batch import adoption_samples, rl_samples
from policies.metrics import episode_metrics
from policies.replay import check_replay
from policies.tokens import ChatRecorder
from policies.types import TrainSample
from specs.config import RunConfig
from specs.task import TaskSpec
from specs.trajectory import Trajectory

logger = logging.getLogger(__name__)


async def run_steps(s: Session, tasks: CuratedTasks, eval_tasks: Sequence[TaskSpec], first: int) -> None:
    """Steps ``first..train.steps``, each logged once (after its checkpoint)."""
    cfg = s.cfg
    steps = max(cfg.train.steps - first + 1, 0)
    with s.reporter.progress("rollout groups", steps * cfg.rollout.tasks_per_step) as advance:
        orchestrator = StepOrchestrator(
            pipeline=s.pipeline,
            draw=tasks.draw,
            position=tasks.position,
            version=s.actors.generator.get_version,
            group_size=cfg.rollout.group_size,
            sampling=s.sampling,
            limits=s.limits,
            max_staleness=cfg.staleness,
            prepare=tasks.prepare,
            on_group=lambda step, group: advance(),
        )
        last, engine = time.perf_counter(), await s.actors.generator.stats()
        async with orchestrator.run(first, cfg.train.steps) as rollouts:
            async for rollout in rollouts:
                metrics = await train_step(s, orchestrator, rollout)
                now, engine_now = time.perf_counter(), await s.actors.generator.stats()
                metrics |= {"step_s": now - last, **engine_use(engine, engine_now, now - last)}
                last, engine = now, engine_now
                step = rollout.step
                metrics["env_nodes"] = await s.join_env_nodes(step)
                if cfg.train.checkpoint_every and step % cfg.train.checkpoint_every == 0:
                    await save_step_checkpoint(s, step, rollout.position, tasks)
                s.reporter.log("train", step, metrics)  # after the checkpoint: a resumed run logs it once
                if cfg.train.eval_every and step % cfg.train.eval_every == 0 and step < cfg.train.steps:
                    await evaluate(s, eval_tasks, f"step{step}", step)


async def train_step(s: Session, orchestrator: StepOrchestrator, rollout: StepRollout) -> dict[str, float]:
    """Train on one step's complete groups and serve the new weights; the step's metrics."""
    actors, m = s.actors, rollout.pipeline.metrics
    await actors.pool.sweep()  # past their time-to-live, or left by dead owners
    trajectories = [t for g in rollout.groups for t in g.trajectories]
    s.reporter.write_trajectories(f"step_{rollout.step:04d}", trajectories, s.tokenizer)
    orchestrator.drop_stale(rollout)
    if s.cfg.rollout.observation_rule is not None:  # train only on contexts the log rebuilds
        for _ in range(drop_unreplayable(rollout.groups, s.recorder)):
            m.lose("replay_mismatch")
    complete = [g.trajectories for g in rollout.groups if g.dropped is None]
    if not complete:  # systemic, not one bad trajectory: stop rather than train on nothing
        raise RuntimeError(f"step {rollout.step}: every group was lost ({m.lost}); see the log above")
    samples = step_samples(s.cfg, complete)
    lr = s.cfg.learner.lr_at(rollout.step)  # the schedule counts steps, so a resumed run goes on with it
    started = time.perf_counter()
    update: dict[str, float] = {}
    async with training_phase(actors):  # colocated on a GPU: the engine sleeps
        for _ in range(s.cfg.learner.epochs_per_step if samples else 0):
            update = await actors.trainer.train_step(samples, lr=lr)
    update_s = time.perf_counter() - started
    started = time.perf_counter()
    if samples:
        await publish_weights(actors)
    sync_s = time.perf_counter() - started
    versions = [v for group in complete for t in group for v in t.versions]
    stalest = orchestrator.staleness(min(versions)) if versions else 0  # in policies published since
    orchestrator.completed(rollout.step, await actors.trainer.get_version())  # the next steps may sample
    return {
        **episode_metrics([t for group in complete for t in group], gui_servers=s.cfg.gui_servers),
        **{k: float(v) for k, v in update.items()},
        "samples": float(len(samples)),
        "lr": lr,
        "gen_tok_s": sum(t.num_generated_tokens for t in trajectories) / rollout.rollout_s,
        "rollout_s": rollout.rollout_s,
        "gate_wait_s": rollout.waited_s,
        "update_s": update_s,
        "sync_s": sync_s,
        "staleness_max": float(stalest),
        **m.as_metrics(),
    }


def step_samples(cfg: RunConfig, complete: Sequence[Sequence[Trajectory]]) -> list[TrainSample]:
    """One step's learner samples from its complete groups' scores: tool-adoption step samples
    (``algorithm.returns: adoption``, packed one row per segment, groups outside ``algorithm.band``
    left out) or GRPO-family samples, whose action stream learns from the tool family
    (``algorithm.tool_reward``) or the task outcome, and whose reasoning stream from the reasoning
    family (``algorithm.reasoning_reward``)."""
    algo = cfg.algorithm
    if algo.returns == "adoption":  # one row per segment, not per step: the same update, faster
        return adoption_samples(complete, eps=algo.eps, pack=True, band=algo.band)
    return rl_samples(
        complete,
        std_normalize=algo.normalize_std,
        eps=algo.eps,
        keep_zero=algo.kl_coef > 0,
        band=algo.band,
        reasoning=algo.reasoning_reward,
        action_signal="tool" if algo.tool_reward else "task",
    )


def drop_unreplayable(groups: Sequence[Group], recorder_factory: Callable[[], ChatRecorder]) -> int:
    """Drop (``dropped = "replay_mismatch"``) each complete group with a trajectory whose logged
    observation-rule records do not rebuild its tokens exactly (``policies.replay``); returns how
    many trajectories failed. A rule that is not replayed faithfully trains on contexts the model
    never saw (paper 002, §5.3)."""
    failed = 0
    for group in groups:
        if group.dropped is not None:
            continue
        for t in group.trajectories:
            problem = check_replay(t, recorder_factory)
            if problem is not None:
                logger.warning("%s; group %s dropped", problem, group.group_id)
                failed += 1
                group.dropped = "replay_mismatch"
    return failed


async def save_step_checkpoint(s: Session, step: int, position: int, tasks: CuratedTasks) -> str:
    """``<checkpoint_dir>/step-NNNN``: the learner's state, then ``progress.json`` (which makes the
    checkpoint complete); older step checkpoints beyond ``train.keep_checkpoints`` are removed."""
    directory = step_dir(s.cfg.checkpoint_dir, step)
    await s.actors.trainer.save_checkpoint(directory)
    progress = Progress(
        step=step,
        version=await s.actors.trainer.get_version(),
        position=position,
        curation=tasks.curator.state_dict() if tasks.curator is not None else None,
        run_id=s.run_id,
    )
    write_progress(directory, progress)
    # step-0000 is a resumed run's KL reference (launch.train): kept while the KL needs one
    prune(
        s.cfg.checkpoint_dir, s.cfg.train.keep_checkpoints, keep_start=s.cfg.algorithm.needs_reference_model
    )
    return directory
