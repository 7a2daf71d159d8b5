"""The step orchestrator: rollouts for step ``s`` produced under a staleness bound, consumed in order.

Colocated and async placement are one engine with one parameter, the staleness bound ``S``:

- step ``s``'s rollouts may start once the policy of step ``s - 1 - S`` is published, i.e. once
  ``completed >= s - 1 - S`` steps have trained and sent their weights to the generator;
- at most ``S + 1`` steps are produced-but-not-trained at once (backpressure: the producer waits
  for the learner instead of piling up trajectories);
- ``consume`` yields steps in order; a group whose oldest turn is more than ``S`` published
  policies behind the learner is dropped (``stale``) and counted. With the gate above it never
  happens; the check makes the bound a guarantee rather than a consequence of timing. Staleness
  counts the policies published since a turn's (``completed(step, version)``), not optimizer
  updates: a step of ``learner.epochs_per_step`` updates publishes one policy.

``S = 0`` is colocated: step ``s`` starts after step ``s - 1`` trained, so generation and training
alternate. ``S = 1`` (async, the default) is one-step off-policy: the generator samples step
``s + 1`` with policy ``s - 1`` while the learner trains step ``s``; the loss uses the rollout
logprobs, so the importance ratio corrects for the lag. Each turn records its policy version
(``Trajectory.versions``); the generator swaps weights between turns (``VllmEngine.update_weights``
drains the turns in flight), so an episode pauses for at most one turn.

Steps draw their tasks in step order, whatever the timing, so a step's tasks depend only on the
stream's position when it was drawn: ``positions[s]`` (the stream position after drawing step
``s``) is what a checkpoint saves to resume with the same data order. Nothing here knows about a
domain, Ray or a learner: the caller trains each consumed step and calls ``completed(step)``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from actors.groups import Group
from actors.rollout import RolloutPipeline
from policies.react import EpisodeLimits
from policies.types import SamplingConfig
from specs.task import TaskSpec

logger = logging.getLogger(__name__)


class StepRollout(msgspec.Struct, kw_only=True):
    """The rollouts of one training step, in the order the groups completed."""

    step: int
    groups: list[Group]
    position: int
    """Task-stream position after this step's tasks were drawn (a checkpoint resumes from it)."""
    started_version: int
    """Policy version the generator served when this step's rollouts started."""
    rollout_s: float
    """Seconds from the step's first episode to its last group."""
    waited_s: float
    """Seconds the step waited for the staleness gate or for room (backpressure)."""
    pipeline: RolloutPipeline
    """The step's pipeline, for its stage metrics."""


class StepOrchestrator:
    """Runs steps ``first..last``: produce each step's groups under the staleness bound, yield them
    in order. ``draw(step)`` returns the step's tasks (called in step order); ``prepare(step)`` runs
    before the draw (e.g. curation profiling); ``pipeline()`` builds a fresh rollout pipeline."""

    def __init__(
        self,
        *,
        pipeline: Callable[[], RolloutPipeline],
        draw: Callable[[int], Sequence[TaskSpec]],
        position: Callable[[], int],
        version: Callable[[], Awaitable[int]],
        group_size: int,
        sampling: SamplingConfig,
        limits: EpisodeLimits,
        max_staleness: int,
        prepare: Callable[[int], Awaitable[None]] | None = None,
        on_group: Callable[[int, Group], None] | None = None,
    ) -> None:
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0 (0: colocated, on-policy), got {max_staleness}")
        self._pipeline, self._draw, self._position, self._version = pipeline, draw, position, version
        self._group_size, self._sampling, self._limits = group_size, sampling, limits
        self.max_staleness = max_staleness
        self._prepare, self._on_group = prepare, on_group
        self._completed = 0
        self._published: set[int] = set()  # policy versions served after a step trained
        self._progress = anyio.Event()  # set (and replaced) whenever a step completes
        self.stale_dropped = 0

    @contextlib.asynccontextmanager
    async def run(self, first: int, last: int) -> AsyncIterator[AsyncIterator[StepRollout]]:
        """``async with orchestrator.run(first, last) as rollouts: async for rollout in rollouts``:
        steps ``first..last`` in order; the caller trains each and calls ``completed(step)`` once
        the new weights reach the generator. Leaving the block early cancels the rollouts in
        flight (their environments are released); an error in the block comes out as itself."""
        self._completed = first - 1
        send, receive = anyio.create_memory_object_stream[StepRollout](
            max_buffer_size=max(last - first + 1, 0)
        )
        try:
            async with anyio.create_task_group() as tg, receive:
                tg.start_soon(self._produce, first, last, send)
                try:
                    yield self._in_order(receive, first, last)
                finally:
                    tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:  # one failure (the caller's, or a producer's): itself
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    async def _in_order(
        self, receive: MemoryObjectReceiveStream[StepRollout], first: int, last: int
    ) -> AsyncIterator[StepRollout]:
        ready: dict[int, StepRollout] = {}
        for step in range(first, last + 1):
            while step not in ready:
                produced = await receive.receive()
                ready[produced.step] = produced
            yield ready.pop(step)

    def completed(self, step: int, version: int) -> None:
        """Step ``step`` trained and the generator serves its weights, policy ``version`` (the same
        as before when the step had nothing to train on): later steps may start."""
        if step != self._completed + 1:
            raise ValueError(f"completed({step}) out of order: step {self._completed} was the last one")
        self._completed = step
        self._published.add(version)
        self._progress.set()
        self._progress = anyio.Event()

    def staleness(self, version: int) -> int:
        """How many policies were published after ``version``: 0 for the policy served now."""
        return sum(1 for published in self._published if published > version)

    def drop_stale(self, rollout: StepRollout) -> int:
        """Drop (``stale``) each complete group with a turn more than ``max_staleness`` published
        policies old; returns the number of groups dropped."""
        dropped = 0
        for group in rollout.groups:
            versions = [v for t in group.trajectories for v in t.versions]
            if group.dropped is None and versions and self.staleness(min(versions)) > self.max_staleness:
                group.dropped = "stale"
                rollout.pipeline.metrics.lose("stale")
                dropped += 1
        self.stale_dropped += dropped
        return dropped

    async def _produce(self, first: int, last: int, send: MemoryObjectSendStream[StepRollout]) -> None:
        async with send, anyio.create_task_group() as tg:
            for step in range(first, last + 1):
                queued = time.perf_counter()
                # Gate: policy of step - 1 - S is served; room: at most S + 1 steps untrained.
                while self._completed < step - 1 - self.max_staleness:
                    await self._progress.wait()
                if self._prepare is not None:
                    await self._prepare(step)
                tasks = list(self._draw(step))
                position = self._position()
                version = await self._version()
                tg.start_soon(
                    self._collect, step, tasks, position, version, time.perf_counter() - queued, send.clone()
                )

    async def _collect(
        self,
        step: int,
        tasks: list[TaskSpec],
        position: int,
        version: int,
        waited: float,
        send: MemoryObjectSendStream[StepRollout],
    ) -> None:
        pipeline = self._pipeline()
        started = time.perf_counter()
        groups = []
        stream = pipeline.stream(tasks, self._group_size, self._sampling, self._limits)
        async with send, contextlib.aclosing(stream):  # type: ignore[type-var]  # an async generator
            async for group in stream:
                groups.append(group)
                if self._on_group is not None:
                    self._on_group(step, group)
            await send.send(
                StepRollout(
                    step=step,
                    groups=groups,
                    position=position,
                    started_version=version,
                    rollout_s=time.perf_counter() - started,
                    waited_s=waited,
                    pipeline=pipeline,
                )
            )
