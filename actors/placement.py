"""Placement: which actors exist, where they run, and how weights move between them.

Two placements, one training loop (``actors/orchestrator.py`` runs both; they differ by the
staleness bound and by devices):

- ``colocated``: the Generator and the Learner share the devices and alternate. On a GPU both
  actors sit in one placement-group bundle of one GPU (half each, as Ray counts), and the engine
  sleeps while the learner trains (vLLM sleep mode: weights to host memory, KV cache freed), so the
  learner gets the device's memory; weights then go to the woken engine.
- ``async``: generation and training run at once on separate devices, a placement group of two
  one-GPU bundles on one node (STRICT_PACK), the generator on the first and the learner on the
  second; on CPU they are separate processes on the same cores.

Weights travel as one safetensors file in shared memory (``/dev/shm``); both actors are on one node
(the driver's on CPU, the placement group's on GPU). The last file is kept until the next one, so a
restarted generator can be re-synced (``actors/supervisor.py``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import msgspec

from actors.env_front import EnvAgent, EnvFront
from actors.generator import GeneratorHandle
from actors.remote import AsyncProxy, remote_class
from actors.seams import EnvPoolSeam, EvaluatorSeam, GatewaySeam, LearnerSeam
from actors.supervisor import SupervisedGenerator
from specs.config import RunConfig

logger = logging.getLogger(__name__)


class Actors(msgspec.Struct, kw_only=True):
    """Proxies over the run's Ray actors, typed by their seams (``await actors.trainer.train_step(...)``)."""

    envs: EnvFront
    """The env nodes' agents (pool, gateway, evaluator each) behind one front, which serves as the
    run's ``pool``, ``gateway`` and ``evaluator``."""
    engine: GeneratorHandle | None
    """``None`` when the episodes come from a scripted policy (``start_actors(generator=False)``)."""
    learner: LearnerSeam | None
    """``None`` in an evaluation (``start_actors(learner=False)``); see ``trainer``."""
    handles: list[Any]
    weights_dir: str
    latest_weights: tuple[int, str] | None = None
    """The last published ``(version, file)``: kept so a restarted generator can be re-synced."""
    placement_group: Any = None
    """The GPU placement group, removed at shutdown (``None`` on CPU)."""
    sleep_while_training: bool = False

    @property
    def pool(self) -> EnvPoolSeam:
        return self.envs

    @property
    def gateway(self) -> GatewaySeam:
        return self.envs

    @property
    def evaluator(self) -> EvaluatorSeam:
        return self.envs

    @property
    def generator(self) -> GeneratorHandle:
        """The generator; ``RuntimeError`` in a run started without one (a scripted evaluation)."""
        if self.engine is None:
            raise RuntimeError(
                "these actors were started without a generator (start_actors(generator=False))"
            )
        return self.engine

    @property
    def trainer(self) -> LearnerSeam:
        """The learner; ``RuntimeError`` in a run started without one (an evaluation)."""
        if self.learner is None:
            raise RuntimeError("these actors were started without a learner (start_actors(learner=False))")
        return self.learner


class DevicePlan(msgspec.Struct, frozen=True, kw_only=True):
    """GPUs of the generator and the learner and the placement-group bundles they use (none on CPU)."""

    bundles: tuple[dict[str, float], ...] = ()
    generator_gpus: float = 0.0
    learner_gpus: float = 0.0
    generator_bundle: int = 0
    learner_bundle: int = 0
    sleep_while_training: bool = False
    """Colocated on a GPU: the engine sleeps while the learner trains."""


def device_plan(placement: str, gpus: float, *, learner: bool = True) -> DevicePlan:
    """Where the generator and learner run, given the cluster's GPU count (0: CPU only)."""
    if gpus <= 0:
        return DevicePlan()
    if not learner:  # an evaluation: the engine alone on one GPU
        return DevicePlan(bundles=({"GPU": 1.0},), generator_gpus=1.0)
    if placement == "colocated":
        return DevicePlan(
            bundles=({"GPU": 1.0},), generator_gpus=0.5, learner_gpus=0.5, sleep_while_training=True
        )
    if gpus < 2:
        raise ValueError(
            f"placement: async needs 2 GPUs (one generates while the other trains), the cluster has "
            f"{gpus:g}; use placement: colocated"
        )
    return DevicePlan(
        bundles=({"GPU": 1.0}, {"GPU": 1.0}), generator_gpus=1.0, learner_gpus=1.0, learner_bundle=1
    )


def start_actors(
    cfg: RunConfig,
    run_id: str,
    control_tokens: Sequence[str] = (),
    *,
    learner: bool = True,
    generator: bool = True,
) -> Actors:
    """Create every actor of the run (Ray must be initialised). ``control_tokens``: the model's
    special tokens, which the gateway escapes in every tool observation; ``learner=False`` (an
    evaluation) leaves the learner out (``Actors.learner`` is then ``None``), ``generator=False``
    (a scripted policy's evaluation) the generator (``Actors.engine`` is then ``None``)."""
    import ray

    from actors.generator import remote_generator
    from actors.learner import remote_learner

    # Environments live on the env nodes (the driver's by default), each node's pool, gateway and
    # evaluator pinned to it: an env's processes, its servers and the evaluator's view of it share a host.
    front, agent_handles = start_env_agents(cfg, run_id, control_tokens)
    plan = device_plan(cfg.placement, ray.cluster_resources().get("GPU", 0.0), learner=learner)
    group, on_device = _device_options(plan)
    handles: list[Any] = list(agent_handles)
    engine = None
    if generator:
        # A dead engine process is restarted by Ray; SupervisedGenerator re-syncs its weights.
        remote = remote_generator(
            max_restarts=cfg.generator.max_restarts, max_task_retries=0, **on_device("generator")
        ).remote(
            model_path=cfg.model.path,
            dtype=cfg.model.dtype,
            max_model_len=cfg.generator.max_model_len,
            kv_cache_gib=cfg.generator.kv_cache_gib,
            enforce_eager=cfg.generator.enforce_eager,
            max_num_seqs=cfg.generator.max_num_seqs,
            gpu_memory_utilization=cfg.generator.gpu_memory_utilization,
            seed=cfg.seed,
            sleep_mode=plan.sleep_while_training,
            max_images_per_prompt=cfg.rollout.max_episode_images or 8,
        )
        handles.append(remote)
        # The supervisor reads the latest published weights when it re-syncs, long after this returns.
        engine = SupervisedGenerator(cast(GeneratorHandle, AsyncProxy(remote)), lambda: actors.latest_weights)
    trainer = None
    if learner:
        # Ray gives a zero-CPU actor OMP_NUM_THREADS=1; the colocated learner owns the node's cores
        # while it trains (generation is idle then), so it gets them all.
        threads = {"OMP_NUM_THREADS": str(os.cpu_count() or 1)}
        trainer = remote_learner(runtime_env={"env_vars": threads}, **on_device("learner")).remote(
            cfg.model.path,
            cfg.learner,
            cfg.algorithm,
            dtype=cfg.model.dtype,
            seed=cfg.seed,
            max_len=cfg.rollout.max_context_tokens,
        )
        handles.append(trainer)
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    actors = Actors(
        envs=front,
        engine=engine,
        learner=cast(LearnerSeam, AsyncProxy(trainer)) if trainer is not None else None,
        handles=handles,
        weights_dir=tempfile.mkdtemp(prefix=f"mcprl-{run_id}-", dir=shm),
        placement_group=group,
        sleep_while_training=plan.sleep_while_training,
    )
    return actors


def start_env_agents(
    cfg: RunConfig, run_id: str, control_tokens: Sequence[str]
) -> tuple[EnvFront, list[Any]]:
    """An agent (``EnvPool``, ``McpGateway``, ``Evaluator`` actors, pinned there) on each env node
    (``env_nodes``), the front over them, and their Ray handles."""
    agents, handles = [], []
    for node, resources in env_nodes(cfg.env.node_resource):
        agent, more = start_env_agent(cfg, run_id, control_tokens, node, resources)
        agents.append(agent)
        handles += more
    return EnvFront(agents, reuse=cfg.env.reuse), handles


def start_env_agent(
    cfg: RunConfig, run_id: str, control_tokens: Sequence[str], node: str, resources: dict[str, float]
) -> tuple[EnvAgent, list[Any]]:
    """The agent of env node ``node`` (its pool under the node's settings: ``env.node_groups``)."""
    from actors.env_pool import remote_env_pool
    from actors.evaluator import Evaluator
    from actors.mcp_gateway_actor import remote_mcp_gateway
    from actors.provisioners.base import make_provisioner
    from specs.scoring import scoring_for

    here = {"scheduling_strategy": _on_node(node)}
    env = cfg.env.on_node(resources)
    pool = remote_env_pool(
        make_provisioner(env.backend, **env.provisioner_options()),
        run_id,
        env.max_live,
        env.reuse,
        hook_modules=cfg.hook_modules,
        ttl_s=env.ttl_s,
        watchdog=True,  # a killed driver (and with it this actor) leaves no environment behind
        ray_options=here,
    )
    gateway = remote_mcp_gateway(
        ray_options=here,
        control_tokens=tuple(control_tokens),
        keep_images=cfg.rollout.keep_images,
        max_episode_images=cfg.rollout.max_episode_images,
    )
    evaluator = remote_class(Evaluator, **here).remote(
        hook_modules=cfg.hook_modules, scoring=scoring_for(cfg)
    )
    agent = EnvAgent(
        node=node,
        pool=cast(EnvPoolSeam, AsyncProxy(pool)),
        gateway=cast(GatewaySeam, AsyncProxy(gateway)),
        evaluator=cast(EvaluatorSeam, AsyncProxy(evaluator)),
        capacity=env.max_live,
        backend=env.backend,
    )
    return agent, [pool, gateway, evaluator]


async def join_env_nodes(
    front: EnvFront, cfg: RunConfig, run_id: str, control_tokens: Sequence[str]
) -> list[tuple[str, list[Any]]]:
    """The env nodes that came up since ``front`` was made (a new node, or one started again: Ray
    gives it a new id) get an agent, which reaps what a dead agent left on its host, and join the
    front: each node's id and its agent's Ray handles. None without ``env.node_resource``."""
    if cfg.env.node_resource is None:
        return []
    import ray

    known = set(front.loads) | set(front.lost)
    joined = []
    for node, resources in env_nodes(cfg.env.node_resource):
        if node in known:
            continue
        agent, handles = start_env_agent(cfg, run_id, control_tokens, node, resources)
        try:
            await agent.pool.reap_leftovers()
        except Exception:  # a node that cannot host its agent stays out; the run goes on
            logger.warning("env node %s came up but its agent did not start; left out", node, exc_info=True)
            for handle in handles:
                ray.kill(handle)
            continue
        front.join(agent)
        joined.append((node, handles))
    return joined


def env_nodes(resource: str | None) -> list[tuple[str, dict[str, float]]]:
    """The alive Ray nodes that have ``resource`` (``None``: the driver's node): id and resources."""
    import ray

    if resource is None:
        here = ray.get_runtime_context().get_node_id()
        return [(n["NodeID"], n["Resources"]) for n in ray.nodes() if n["NodeID"] == here] or [(here, {})]
    nodes = [
        (n["NodeID"], n["Resources"])
        for n in ray.nodes()
        if n["Alive"] and n["Resources"].get(resource, 0) > 0
    ]
    nodes.sort(key=lambda node: node[0])
    if not nodes:
        raise ValueError(
            f"env.node_resource is {resource!r}, but no alive Ray node has that resource; start the "
            f"environment nodes with `ray start --resources '{{\"{resource}\": 1}}'`, or set it to null"
        )
    return nodes


def _device_options(plan: DevicePlan) -> tuple[Any, Any]:
    """The placement group of ``plan`` (``None`` on CPU) and ``role -> Ray options``."""
    if not plan.bundles:
        here = {"scheduling_strategy": _this_node()}
        return None, lambda role: dict(here)
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    group = placement_group(list(plan.bundles), strategy="STRICT_PACK")
    ray.get(group.ready(), timeout=600)

    def options(role: str) -> dict[str, Any]:
        bundle = plan.generator_bundle if role == "generator" else plan.learner_bundle
        gpus = plan.generator_gpus if role == "generator" else plan.learner_gpus
        strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=bundle)
        return {"num_gpus": gpus, "scheduling_strategy": strategy}

    return group, options


@contextlib.asynccontextmanager
async def training_phase(actors: Actors) -> AsyncIterator[None]:
    """Around a learner update: colocated on a GPU the engine sleeps (its memory to the learner)
    and wakes after; otherwise nothing."""
    if not actors.sleep_while_training:
        yield
        return
    await actors.generator.sleep()
    try:
        yield
    finally:
        await actors.generator.wake_up()


def _this_node() -> Any:
    import ray

    return _on_node(ray.get_runtime_context().get_node_id())


def _on_node(node: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node, soft=False)


async def publish_weights(actors: Actors) -> int:
    """Hand the learner's current weights to the generator; returns the new policy version."""
    version: int = await actors.trainer.get_version()
    path = os.path.join(actors.weights_dir, f"weights-v{version}.safetensors")
    await actors.trainer.export_weights(path)
    previous, actors.latest_weights = actors.latest_weights, (version, path)
    if previous is not None and previous[1] != path:
        os.unlink(previous[1])  # one copy kept: what a restarted generator is re-synced to
    await actors.generator.update_weights(version, path)
    return version


async def stop_actors(actors: Actors) -> None:
    """Destroy every environment, stop the engine, kill the actors; safe to call after a failure."""
    import ray

    stoppable: list[tuple[str, Any]] = [("environments", actors.envs), ("generator", actors.engine)]
    for name, actor in stoppable:
        try:
            if actor is not None:
                await actor.shutdown()
        except Exception:  # an actor that died has nothing left to stop; the reaper covers its envs
            logger.warning("shutdown of %s failed", name, exc_info=True)
    for handle in actors.handles:
        ray.kill(handle)
    if actors.placement_group is not None:
        from ray.util.placement_group import remove_placement_group

        remove_placement_group(actors.placement_group)
    shutil.rmtree(actors.weights_dir, ignore_errors=True)
