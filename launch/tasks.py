"""Which training tasks each step samples: a seeded stream, and gradient-band curation over it.

``TaskStream`` draws tasks in a seeded order, reshuffled each pass, so a step's tasks depend only on
its position in the stream (a resumed run draws the same ones). ``CuratedTasks`` is what the step
orchestrator asks for (``draw``, ``position``, ``prepare``): the stream, skipping the tasks whose
profiled pass rate lies outside ``train.curation_band`` (paper 002, App. F), profiled when due.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rewards.adoption import PassRateCurator
from specs.task import TaskSpec

if TYPE_CHECKING:  # the stream is plain data; only curation runs episodes
    from launch.session import Session


class TaskStream:
    """Training tasks in a seeded order, reshuffled each pass; ``position`` counts tasks drawn.
    ``keep`` skips the tasks it refuses, in the same order."""

    def __init__(self, tasks: Sequence[TaskSpec], seed: int) -> None:
        self.tasks, self._seed, self.position = list(tasks), seed, 0

    def take(self, n: int, keep: Callable[[TaskSpec], bool] | None = None) -> list[TaskSpec]:
        if keep is not None and not any(keep(t) for t in self.tasks):
            raise RuntimeError("curation left no training task inside its pass-rate band")
        out: list[TaskSpec] = []
        while len(out) < n:
            epoch, index = divmod(self.position, len(self.tasks))
            order = list(range(len(self.tasks)))
            random.Random(self._seed * 1_000_003 + epoch).shuffle(order)
            task = self.tasks[order[index]]
            self.position += 1
            if keep is None or keep(task):
                out.append(task)
        return out


class CuratedTasks:
    """The steps' task source: ``draw(step)`` takes ``rollout.tasks_per_step`` tasks from the stream,
    less those curation refuses; ``prepare(step)`` profiles pass rates first when curation is due."""

    def __init__(self, s: Session, stream: TaskStream) -> None:
        self._s, self.stream = s, stream
        train = s.cfg.train
        self.curator = (
            PassRateCurator(train.curation_band, train.curation_samples, train.curation_every)
            if train.curation_samples
            else None
        )

    def position(self) -> int:
        return self.stream.position

    def draw(self, step: int) -> list[TaskSpec]:
        return self.stream.take(self._s.cfg.rollout.tasks_per_step, keep=self._kept)

    def _kept(self, task: TaskSpec) -> bool:
        return self.curator is None or bool(self.curator.trainable([task.instance_id]))

    async def prepare(self, step: int) -> None:
        if self.curator is not None and self.curator.due(step - 1):
            await self.profile(step)

    def _rate(self, task_id: str) -> str:
        assert self.curator is not None
        rate = self.curator.pass_rate(task_id)
        return "unprofiled" if rate is None else f"{rate:.2f}"  # a group that lost an episode is kept

    async def profile(self, step: int) -> None:
        """Each training task's pass rate over ``train.curation_samples`` sampled episodes."""
        assert self.curator is not None
        s, tasks, samples = self._s, self.stream.tasks, self._s.cfg.train.curation_samples
        with s.reporter.progress("curation profile", len(tasks)) as advance:
            groups = await s.pipeline().collect(tasks, samples, s.sampling, s.limits, advance)
        for group in groups:
            outcomes = [t.succeeded for t in group.trajectories if t.status == "ok"]
            if len(outcomes) == samples:  # a group that lost a member says nothing
                self.curator.update(group.task_id, outcomes)
        trajectories = [t for group in groups for t in group.trajectories]
        s.reporter.write_trajectories(f"curation_{step:04d}", trajectories, s.tokenizer)
        kept = self.curator.trainable([t.instance_id for t in tasks])
        s.reporter.log("curation", step, {"tasks": float(len(tasks)), "kept": float(len(kept))})
        band = s.cfg.train.curation_band
        rates = ", ".join(f"{task_id} {self._rate(task_id)}" for task_id in kept)
        print(f"curation: {len(kept)} of {len(tasks)} tasks have a pass rate in {band}: {rates}", flush=True)
