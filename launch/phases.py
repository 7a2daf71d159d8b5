"""The phases of a training run around the RL steps: greedy evaluation and the warm start.

Each is one function of the ``Session`` (``launch.session``): it runs episodes through the very
pipeline the RL steps use, logs a row of the per-phase table, and writes its trajectories.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence

from actors.placement import publish_weights, training_phase
from launch.session import Session
from launch.tasks import TaskStream
from policies.batch import demonstration_samples, why_no_demonstration
from policies.metrics import OVERALL, episode_metrics, metrics_with_stderr
from policies.scripted import Respond, ScriptedEngine
from policies.types import SamplingConfig
from specs.task import TaskSpec


async def evaluate(s: Session, tasks: Sequence[TaskSpec], phase: str, step: int) -> dict[str, float]:
    """Greedy episodes on ``tasks`` (and ``train.eval_samples`` sampled ones per task, logged as
    ``eval_sampled/<phase>``); the greedy phase's metrics (``lost``: episodes lost to
    infrastructure, a failure of the run and not of the policy: reported, not hidden)."""
    metrics = await _eval_run(s, tasks, phase, step, 1, s.greedy, "")
    if s.cfg.train.eval_samples:
        await _eval_run(s, tasks, phase, step, s.cfg.train.eval_samples, s.sampling, "_sampled")
    return metrics


async def _eval_run(
    s: Session, tasks: Sequence[TaskSpec], phase: str, step: int, k: int, sampling: SamplingConfig, kind: str
) -> dict[str, float]:
    with s.reporter.progress(f"eval{kind} {phase}", len(tasks) * k) as advance:
        groups = await s.pipeline(evaluation=True).collect(tasks, k, sampling, s.eval_limits, advance)
    trajectories = [t for g in groups for t in g.trajectories]
    s.reporter.write_trajectories(f"eval_{phase}{kind}", trajectories, s.tokenizer)
    lost = sum(t.status != "ok" for t in trajectories)
    gui = s.cfg.gui_servers
    reachable = {t.instance_id: bool(t.reference_calls) for t in tasks} if gui else None
    metrics = {**episode_metrics(trajectories, gui_servers=gui, reachable=reachable), "lost": float(lost)}
    if s.domain_of:  # a run that mixes domains: each domain's numbers too (W&B, not the table)
        rows = metrics_with_stderr(trajectories, s.domain_of, gui, reachable)
        metrics |= {
            f"{d}/{k}": mean for d, row in rows.items() if d != OVERALL for k, (mean, _) in row.items()
        }
    s.reporter.log(f"eval{kind}/{phase}", step, metrics)
    return metrics


async def warm_start(s: Session, tasks: TaskStream, expert: Respond) -> None:
    """Supervised training on the episodes of the domain's expert (``domain.expert``) that
    succeeded: the expert runs through the same environments, gateway and token recording as the
    policy."""
    cfg = s.cfg
    started = time.perf_counter()
    with s.reporter.progress("expert demonstrations", cfg.warmstart.demonstrations) as advance:
        groups = await s.pipeline(lambda task: ScriptedEngine(s.tokenizer, expert, task)).collect(
            tasks.take(cfg.warmstart.demonstrations), 1, s.greedy, s.limits, advance
        )
    episodes = [t for g in groups for t in g.trajectories]
    s.reporter.write_trajectories("demonstrations", episodes, s.tokenizer)
    demos = demonstration_samples(episodes)
    if not demos:
        raise RuntimeError(
            "warm start: the expert produced no successful demonstration: "
            + why_no_demonstration(episodes, cfg.warmstart.demonstrations)
        )
    rng, batch = random.Random(cfg.seed), cfg.warmstart.batch_size
    async with training_phase(s.actors):
        for epoch in range(1, cfg.warmstart.epochs + 1):
            rng.shuffle(demos)
            loss = float("nan")
            with s.reporter.progress(f"warm start epoch {epoch}", len(demos)) as advance:
                for i in range(0, len(demos), batch):
                    loss = (await s.actors.trainer.sft_step(demos[i : i + batch], cfg.warmstart.lr))["loss"]
                    advance(n=len(demos[i : i + batch]))
            s.reporter.log("warmstart", epoch, {"loss": loss, "update_s": time.perf_counter() - started})
    await publish_weights(s.actors)
