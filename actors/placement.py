"""Placement: which actors exist, where they run, and how weights move between them.

``colocated`` (the only placement so far): the Generator and the Learner share the node's devices
and alternate: the rollout phase generates, then the learner updates, then the new weights go to
the generator before the next rollout. Weights travel as one safetensors file in shared memory
(``/dev/shm``), which both actors see because colocated actors live on one node. ``async``
placement (separate devices, bounded staleness) plugs in here without touching the loop's callers.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any

import msgspec

from actors.remote import AsyncProxy, remote_class
from actors.supervisor import SupervisedGenerator
from specs.config import RunConfig

logger = logging.getLogger(__name__)


class Actors(msgspec.Struct, kw_only=True):
    """Proxies over the run's Ray actors (``await actors.learner.train_step(...)``)."""

    pool: Any
    gateway: Any
    evaluator: Any
    generator: Any
    learner: Any
    handles: list[Any]
    weights_dir: str
    latest_weights: tuple[int, str] | None = None
    """The last published ``(version, file)``: kept so a restarted generator can be re-synced."""


def start_actors(
    cfg: RunConfig, run_id: str, control_tokens: Sequence[str] = (), *, learner: bool = True
) -> Actors:
    """Create every actor of the run (Ray must be initialised). ``control_tokens``: the model's
    special tokens, which the gateway escapes in every tool observation; ``learner=False`` (an
    evaluation) leaves the learner out (``Actors.learner`` is then ``None``)."""
    from actors.env_pool import remote_env_pool
    from actors.evaluator import Evaluator
    from actors.generator import remote_generator
    from actors.learner import remote_learner
    from actors.mcp_gateway_actor import remote_mcp_gateway
    from actors.provisioners.base import make_provisioner

    # Colocated means one node: the pool's environments, the gateway's server processes, the
    # evaluator's view of them and the weights file in /dev/shm are all local to the driver's node.
    here = {"scheduling_strategy": _this_node()}
    pool = remote_env_pool(
        make_provisioner(cfg.env.backend, **cfg.env.provisioner_options()),
        run_id,
        cfg.env.max_live,
        cfg.env.reuse,
        hook_modules=cfg.domain.hook_modules,
        ttl_s=cfg.env.ttl_s,
        watchdog=True,  # a killed driver (and with it this actor) leaves no environment behind
        ray_options=here,
    )
    gateway = remote_mcp_gateway(ray_options=here, control_tokens=tuple(control_tokens))
    evaluator = remote_class(Evaluator, **here).remote(hook_modules=cfg.domain.hook_modules)
    # A dead engine process is restarted by Ray; SupervisedGenerator re-syncs its weights.
    generator = remote_generator(max_restarts=cfg.generator.max_restarts, max_task_retries=0, **here).remote(
        model_path=cfg.model.path,
        dtype=cfg.model.dtype,
        max_model_len=cfg.generator.max_model_len,
        kv_cache_gib=cfg.generator.kv_cache_gib,
        enforce_eager=cfg.generator.enforce_eager,
        max_num_seqs=cfg.generator.max_num_seqs,
        gpu_memory_utilization=cfg.generator.gpu_memory_utilization,
        seed=cfg.seed,
    )
    handles = [pool, gateway, evaluator, generator]
    trainer = None
    if learner:
        # Ray gives a zero-CPU actor OMP_NUM_THREADS=1; the colocated learner owns the node's cores
        # while it trains (generation is idle then), so it gets them all.
        threads = {"OMP_NUM_THREADS": str(os.cpu_count() or 1)}
        trainer = remote_learner(runtime_env={"env_vars": threads}, **here).remote(
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
        pool=AsyncProxy(pool),
        gateway=AsyncProxy(gateway),
        evaluator=AsyncProxy(evaluator),
        generator=None,
        learner=AsyncProxy(trainer) if trainer is not None else None,
        handles=handles,
        weights_dir=tempfile.mkdtemp(prefix=f"mcprl-{run_id}-", dir=shm),
    )
    actors.generator = SupervisedGenerator(AsyncProxy(generator), lambda: actors.latest_weights)
    return actors


def _this_node() -> Any:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


async def publish_weights(actors: Actors) -> int:
    """Hand the learner's current weights to the generator; returns the new policy version."""
    version: int = await actors.learner.get_version()
    path = os.path.join(actors.weights_dir, f"weights-v{version}.safetensors")
    await actors.learner.export_weights(path)
    previous, actors.latest_weights = actors.latest_weights, (version, path)
    if previous is not None and previous[1] != path:
        os.unlink(previous[1])  # one copy kept: what a restarted generator is re-synced to
    await actors.generator.update_weights(version, path)
    return version


async def stop_actors(actors: Actors) -> None:
    """Destroy every environment, stop the engine, kill the actors; safe to call after a failure."""
    import ray

    for name in ("gateway", "pool", "generator"):  # gateway first: its servers run in the pool's envs
        try:
            await getattr(actors, name).shutdown()
        except Exception:  # an actor that died has nothing left to stop; the reaper covers its envs
            logger.warning("shutdown of %s failed", name, exc_info=True)
    for handle in actors.handles:
        ray.kill(handle)
    shutil.rmtree(actors.weights_dir, ignore_errors=True)
