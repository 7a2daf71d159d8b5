"""The rollout pipeline: acquire -> run -> evaluate, each stage with its own concurrency.

Every trajectory goes through three stages. *Acquire* takes an environment from the pool (prepare
hooks run there) and opens its MCP sessions; *run* drives the agent loop against the generator
and the gateway; *evaluate* scores the finished episode against the still-live environment, then
the environment is released (cleanup hooks, reset for reuse or destroy if broken). Stages draw on
different resources, so each has its own worker count; the pool caps live environments.

Groups (``group_size`` trajectories of one task) stream out as they complete. A trajectory lost
to infrastructure (a server or environment died, the generator restarted, the node died before
the evaluator was done) is run again on a fresh environment, up to ``retries`` times; a group that
still lacks a member (or that misses its ``group_timeout_s``, or whose evaluator failed) is dropped
whole and counted by cause: a partial group is never trained. Nothing here knows about a domain.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from actors.errors import InfraError, loss_cause
from actors.groups import Group, StageMetrics
from actors.seams import EnvPoolSeam, EvaluatorSeam, GatewaySeam
from policies.engine import Engine
from policies.react import EpisodeLimits, build_messages, run_episode
from policies.tokens import ChatRecorder
from policies.types import SamplingConfig
from specs.cleanup_calls import CleanupCall, cleanup_calls
from specs.env import EnvConfig, EnvInfo
from specs.env_config import EnvPoolConfig
from specs.errors import MCPRLError
from specs.observation_rule import ObservationRule
from specs.registry import available
from specs.servers import ServerRegistry
from specs.task import TaskSpec
from specs.trajectory import Trajectory

logger = logging.getLogger(__name__)

RELEASE_TIMEOUT_S = 120.0
"""Bound on closing an environment's sessions and releasing it (cleanup hooks included)."""
CLEANUP_CALL_TIMEOUT_S = 30.0
"""Bound on one cleanup tool call."""


class RolloutPipeline:
    """Runs groups of episodes through the three stages. Collaborators are the plain classes, or
    ``AsyncProxy``s over their Ray actors, seen through their seams (``actors.seams``)."""

    def __init__(
        self,
        *,
        pool: EnvPoolSeam,
        gateway: GatewaySeam,
        evaluator: EvaluatorSeam,
        env_config_for: Callable[[TaskSpec], EnvConfig],
        engine_for: Callable[[TaskSpec], Engine],
        recorder_factory: Callable[[], ChatRecorder],
        acquire_workers: int,
        run_workers: int,
        eval_workers: int,
        system_prompt: str | None = None,
        gateway_options: dict[str, Any] | None = None,
        observation_rule: ObservationRule | None = None,
        retries: int = 1,
        group_timeout_s: float | None = None,
        hook_modules: Sequence[str] = (),
    ) -> None:
        """``gateway_options``: per-episode options of ``McpGateway.open`` (``budget_s``, ``route``,
        ``top_k``; the retrieval query is the task's prompt); ``observation_rule``: what of past
        tool observations the agent sees (``policies.observations``; ``None``: all); ``retries``:
        how often a trajectory lost to infrastructure is run again; ``group_timeout_s``: a group
        not complete by then is dropped (``None``: no deadline); ``hook_modules``: the run's, to
        tell a per-call cleanup that is a registered hook from one that is a server's tool."""
        if retries < 0 or (group_timeout_s is not None and group_timeout_s <= 0):
            raise ValueError(
                f"retries must be >= 0 and group_timeout_s > 0, got {retries}, {group_timeout_s}"
            )
        self._retries, self._group_timeout_s = retries, group_timeout_s
        self._pool, self._gateway, self._evaluator = pool, gateway, evaluator
        self._gateway_options = dict(gateway_options or {})
        self._env_config_for = env_config_for
        self._engine_for = engine_for
        self._recorder_factory = recorder_factory
        self._acquire = anyio.CapacityLimiter(acquire_workers)
        self._run = anyio.CapacityLimiter(run_workers)
        self._evaluate = anyio.CapacityLimiter(eval_workers)
        self._system_prompt = system_prompt
        self._observation_rule = observation_rule
        self._cleanup_hooks = frozenset(available("cleanup", hook_modules)) if hook_modules else frozenset()
        self._live = 0
        self.metrics = StageMetrics()

    async def collect(
        self,
        tasks: Sequence[TaskSpec],
        group_size: int,
        sampling: SamplingConfig,
        limits: EpisodeLimits,
        on_group: Callable[[Group], None] | None = None,
    ) -> list[Group]:
        """Every group of this batch (dropped ones included, with their reason)."""
        groups = []
        stream = self.stream(tasks, group_size, sampling, limits)
        async with contextlib.aclosing(stream):  # type: ignore[type-var]  # an async generator
            async for group in stream:
                groups.append(group)
                if on_group is not None:
                    on_group(group)
        return groups

    async def stream(
        self, tasks: Sequence[TaskSpec], group_size: int, sampling: SamplingConfig, limits: EpisodeLimits
    ) -> AsyncIterator[Group]:
        """Yield each task's group as soon as its last member is evaluated."""
        send, receive = anyio.create_memory_object_stream[Group](max_buffer_size=len(tasks))
        async with anyio.create_task_group() as tg, receive:
            async with send:
                for task in tasks:
                    tg.start_soon(self._group, task, group_size, sampling, limits, send.clone())
            async for group in receive:
                yield group

    async def _group(
        self,
        task: TaskSpec,
        group_size: int,
        sampling: SamplingConfig,
        limits: EpisodeLimits,
        send: MemoryObjectSendStream[Group],
    ) -> None:
        group_id = f"{task.instance_id}/{uuid.uuid4().hex[:8]}"
        results: list[Trajectory | None] = [None] * group_size

        async def member(slot: int) -> None:
            for attempt in range(self._retries + 1):
                if attempt:
                    self.metrics.retried += 1
                results[slot] = trajectory = await self._trajectory(task, group_id, sampling, limits)
                if trajectory.status != "infra_failed":
                    return

        with anyio.move_on_after(self._group_timeout_s or math.inf) as deadline:
            async with anyio.create_task_group() as tg:
                for slot in range(group_size):
                    tg.start_soon(member, slot)
        if deadline.cancelled_caught:
            self.metrics.lose("group_timeout")
        done = [t for t in results if t is not None]
        group = Group(task_id=task.instance_id, group_id=group_id, trajectories=done)
        failed = [t.status for t in done if t.status != "ok"]
        if deadline.cancelled_caught or failed:
            group.dropped = "group_timeout" if deadline.cancelled_caught else failed[0]
            self.metrics.groups_dropped += 1
        async with send:
            await send.send(group)

    async def _trajectory(
        self, task: TaskSpec, group_id: str, sampling: SamplingConfig, limits: EpisodeLimits
    ) -> Trajectory:
        """One trajectory through the three stages; any failure is data, never a crash."""
        env: EnvInfo | None = None
        trajectory: Trajectory | None = None
        broken = False
        try:
            async with self._stage(self._acquire, "acquire"):
                config = self._env_config_for(task)
                env = await self._pool.acquire(config, task)
                self._live += 1
                self.metrics.max_live_envs = max(self.metrics.max_live_envs, self._live)
                tools = await self._gateway.open(
                    env, list(config.servers), _allowed(task), query=_prompt(task), **self._gateway_options
                )
            self.metrics.acquired += 1

            async with self._stage(self._run, "run"):
                trajectory = await run_episode(
                    task_id=task.instance_id,
                    group_id=group_id,
                    messages=build_messages(_prompt(task), tools, self._system_prompt),
                    recorder=self._recorder_factory(),
                    engine=self._engine_for(task),
                    tools=self._gateway,
                    env_id=env.env_id,
                    sampling=sampling,
                    limits=limits,
                    observation_rule=self._observation_rule,
                )
            self.metrics.episodes += 1
            if trajectory.error and trajectory.status == "ok":  # cut by a limit before any turn
                logger.warning("episode of %s: %s", task.instance_id, trajectory.error)
            if trajectory.status != "ok":
                broken = True
                self.metrics.lose(trajectory.status)
                return trajectory

            async with self._stage(self._evaluate, "evaluate"):
                try:
                    trajectory.score = await self._evaluator.evaluate(task, trajectory, env)
                except InfraError:  # the environment died under the evaluator (its node lost): run again
                    raise
                except MCPRLError as e:
                    logger.warning("evaluator failed on %s: %s", task.instance_id, e)
                    trajectory.status, trajectory.error = "eval_failed", str(e)
                    self.metrics.lose("eval_failed")
            self.metrics.evaluated += 1
            return trajectory
        except Exception as e:  # the one boundary: an episode's failure never crashes the step
            if isinstance(e, MCPRLError):  # expected failure modes (server died, env broken): no traceback
                logger.warning("trajectory of %s failed: %s", task.instance_id, e)
            else:
                logger.exception("trajectory of %s failed in the pipeline", task.instance_id)
            broken = True
            self.metrics.lose(loss_cause(e))
            return _failed(task, group_id, f"{type(e).__name__}: {e}")
        finally:
            if env is not None:
                await self._release(env, task, broken, trajectory)

    @contextlib.asynccontextmanager
    async def _stage(self, limiter: anyio.CapacityLimiter, name: str) -> AsyncIterator[None]:
        """Hold a worker of stage ``name``; time the queueing and the work separately."""
        queued = time.perf_counter()
        self.metrics.count("queued", name, 1)
        try:
            await limiter.acquire()
        finally:
            self.metrics.count("queued", name, -1)
        started = time.perf_counter()
        wait = f"{name}_wait_s"
        setattr(self.metrics, wait, getattr(self.metrics, wait) + started - queued)
        self.metrics.count("busy", name, 1)
        try:
            yield
        finally:
            self.metrics.count("busy", name, -1)
            limiter.release()
            busy = f"{name}_s"
            setattr(self.metrics, busy, getattr(self.metrics, busy) + time.perf_counter() - started)

    async def _release(
        self, env: EnvInfo, task: TaskSpec, broken: bool, trajectory: Trajectory | None
    ) -> None:
        """Run the per-call cleanups the episode owes that are server tools (while the sessions are
        open), close the env's MCP sessions (parking its ``keep_alive`` servers' when it is not
        broken: the gateway's server reuse), then hand it back to the pool (the cleanups that are
        hooks, reset or destroy). Shielded from cancellation but bounded; a failure here is logged
        and counted, never raised into the step: the env is then treated as broken, or left to the
        pool's shutdown and reaper."""
        started = time.perf_counter()
        self._live -= 1
        with anyio.move_on_after(RELEASE_TIMEOUT_S, shield=True) as scope:
            hooks: list[CleanupCall] = []
            try:
                broken = broken or await self._gateway.is_broken(env.env_id)
                if trajectory is not None and not broken:
                    hooks = await self._tool_cleanups(env, task, trajectory)
            except Exception:
                logger.exception("per-call cleanups of %s in env %s failed", task.instance_id, env.env_id)
                broken = True
            try:
                await self._gateway.close(env.env_id, keep_servers=not broken)
            except Exception:
                logger.exception("closing the MCP sessions of env %s failed", env.env_id)
                broken = True
            try:
                await self._pool.release(env, task, broken=broken, tool_cleanups=hooks)
            except Exception:
                logger.exception("releasing env %s to the pool failed", env.env_id)
                self.metrics.lose("release_failed")
        if scope.cancelled_caught:
            logger.error(
                "release of env %s took over %.0f s; left to the pool", env.env_id, RELEASE_TIMEOUT_S
            )
            self.metrics.lose("release_failed")
        self.metrics.release_s += time.perf_counter() - started

    async def _tool_cleanups(self, env: EnvInfo, task: TaskSpec, trajectory: Trajectory) -> list[CleanupCall]:
        """Call the cleanup tools the episode's calls owe (``specs.cleanup_calls``); return the
        cleanups that are registered hooks, for the pool. A cleanup that fails is logged: the
        environment is reset or destroyed anyway, and the episode's score stands."""
        try:
            owed = cleanup_calls(task, trajectory.tool_calls)
        except MCPRLError as e:
            logger.warning("per-call cleanups of %s: %s", task.instance_id, e)
            return []
        hooks = [c for c in owed if c.spec.cleanup_func in self._cleanup_hooks]
        for c in (c for c in owed if c not in hooks):
            name = f"{c.spec.server}__{c.spec.cleanup_func}"
            args = c.arguments if isinstance(c.arguments, dict) else {}
            result = await self._gateway.call(env.env_id, name, args, CLEANUP_CALL_TIMEOUT_S)
            self.metrics.tool_cleanups += 1
            if result.is_error:
                self.metrics.cleanup_failures += 1
                logger.warning(
                    "cleanup %s of %s (for the call of turn %d) failed: %s",
                    *(name, task.instance_id, c.call_turn, result.text[:300]),
                )
        return hooks


def _prompt(task: TaskSpec) -> str:
    """The user message: the instruction, plus the output format the task asks for."""
    if not task.output_format:
        return task.instruction
    fmt = task.output_format if isinstance(task.output_format, str) else json.dumps(task.output_format)
    return f"{task.instruction}\n\nOutput format: {fmt}"


def _allowed(task: TaskSpec) -> dict[str, tuple[str, ...] | None]:
    return {ref.name: ref.tools for ref in task.mcp_servers}


def _failed(task: TaskSpec, group_id: str, error: str) -> Trajectory:
    return Trajectory(
        task_id=task.instance_id,
        group_id=group_id,
        token_ids=[],
        trainable=[],
        logprobs=[],
        versions=[],
        messages=[],
        status="infra_failed",
        error=error,
    )


def env_config_resolver(
    registry: ServerRegistry, limits: EnvPoolConfig | None = None
) -> Callable[[TaskSpec], EnvConfig]:
    """``task -> EnvConfig``: the task's servers resolved through the server registry, its image
    build, and the run's environment limits (``memory_mb``, ``cpus``, ``pids``, ``network`` of an
    ``EnvPoolConfig``); cached per distinct configuration.

    A task's image (``dockerfile_path`` + ``build_args``) is how the docker backend lays out its
    environment; where no env node runs docker (``limits.backends()``) the image is left out
    (``EnvConfig.for_backend``) and the task's prepare hooks lay the environment out alone (a
    domain's prepare copies what the image would hold when the environment lacks it:
    ``specs/domains/swe``). On a mixed fleet the front leaves it out per node."""
    cache: dict[tuple[Any, ...], EnvConfig] = {}
    shared = (
        {name: getattr(limits, name) for name in ("memory_mb", "cpus", "pids", "network")} if limits else {}
    )
    backend = "docker" if limits is None or "docker" in limits.backends() else limits.backend

    def resolve(task: TaskSpec) -> EnvConfig:
        key = (task.server_names, task.dockerfile_path, tuple(sorted(task.build_args.items())))
        if key not in cache:
            cache[key] = EnvConfig(
                servers=tuple(registry.launch(name) for name in task.server_names),
                dockerfile_path=task.dockerfile_path,
                build_args=dict(task.build_args),
                **shared,
            ).for_backend(backend)
        return cache[key]

    return resolve
