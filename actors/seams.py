"""What the rollout pipeline and the drivers call on each actor: one protocol per seam.

The plain classes (``EnvPool``, ``McpGateway``, ``Evaluator``, ``Learner``) satisfy these, and so
does an ``AsyncProxy`` over their Ray actor (``actors.placement`` types it so); tests pass the plain
classes or fakes that implement the same methods. The generator's seam is
``actors.generator.GeneratorHandle``, the engine's ``policies.engine.Engine``. Nothing here imports
Ray.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from policies.react import ToolCaller
from policies.types import ToolSpec, TrainSample
from specs.cleanup_calls import CleanupCall
from specs.env import EnvConfig, EnvInfo, ServerLaunch
from specs.task import TaskSpec
from specs.trajectory import Score, Trajectory


class EnvPoolSeam(Protocol):
    async def acquire(self, config: EnvConfig, task: TaskSpec) -> EnvInfo: ...

    async def release(
        self,
        env: EnvInfo,
        task: TaskSpec,
        *,
        broken: bool = False,
        tool_cleanups: Sequence[CleanupCall] = (),
    ) -> None: ...

    async def prewarm(self, config: EnvConfig, count: int) -> int: ...

    async def sweep(self) -> int: ...

    async def reap_leftovers(self) -> int: ...


class GatewaySeam(ToolCaller, Protocol):
    """The agent loop's ``ToolCaller`` (``call``), plus what the pipeline does around an episode."""

    async def open(
        self,
        env: EnvInfo,
        servers: Sequence[ServerLaunch],
        allowed_tools: dict[str, tuple[str, ...] | None] | None = None,
        *,
        budget_s: float | None = None,
        route: bool = False,
        top_k: int | None = None,
        query: str = "",
    ) -> list[ToolSpec]: ...

    async def is_broken(self, env_id: str) -> bool: ...

    async def close(self, env_id: str, keep_servers: bool = False) -> None: ...


class EvaluatorSeam(Protocol):
    async def evaluate(self, task: TaskSpec, trajectory: Trajectory, env: EnvInfo) -> Score: ...


class LearnerSeam(Protocol):
    async def train_step(self, samples: list[TrainSample], lr: float | None = None) -> dict[str, float]: ...

    async def sft_step(self, samples: list[TrainSample], lr: float | None = None) -> dict[str, float]: ...

    async def reset_optimizer(self) -> None: ...

    async def anchor_reference(self, hf_dir: str | None = None) -> None: ...

    async def get_version(self) -> int: ...

    async def export_weights(self, path: str) -> str: ...

    async def save_checkpoint(self, dir: str) -> None: ...

    async def load_checkpoint(self, dir: str) -> None: ...
