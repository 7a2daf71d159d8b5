"""Environments over several Ray nodes: real episodes placed by the front, and a node killed mid-run.

    python -m launch.bench.env_pool --nodes 3 [--kill-node] [--mixed] [--tasks 12] [--group-size 2] \
        [--backend local]

A Ray cluster of ``--nodes`` nodes on this machine (Ray's own cluster utilities: a head and
workers, each a raylet of its own with the resource ``mcprl_env``), an agent on each (pool,
gateway, evaluator, pinned there: ``actors.placement.start_env_agents``) and the front over them,
as ``launch/train.py`` starts them with ``env.node_resource=mcprl_env``. The rollout pipeline runs
``--tasks`` calculator tasks in groups of ``--group-size`` with the scripted expert (no model: what
is measured is the environment side), every episode real (its environment, its MCP server, its
evaluation on its node), in two rounds, as two training steps would. With ``--mixed`` the workers
also have ``mcprl_env_alt`` and run the other backend of local/bwrap (``env.node_groups``). With
``--kill-node`` a worker node is removed (its raylet and every process of it killed, ungracefully)
once a third of the first round's episodes have started; between the rounds a node is started
again and joins the run (``actors.placement.join_env_nodes``, as ``launch/train.py`` does between
steps), reaping what the dead one left, and takes its share of the second round.

Ends with one line: ``nodes=N episodes=<n> lost=<k> leftovers=<m> spread=<r> partial=<p> joined=<j>``:
episodes that finished and were evaluated; lost: trajectories lost on the way (each run again, or
its group dropped whole); leftovers: environments of the run (their directories, containers) and
processes marked with one of them still on the host after the shutdown; spread: max/min share of
episodes per node (over the nodes that lived from start to end); partial: groups kept with a member
missing (must be 0: a partial group is never trained); joined: episodes of the second round served
by the node that joined.
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

import anyio

NODE_RESOURCE = "mcprl_env"
ALT_RESOURCE = "mcprl_env_alt"
"""The workers' second resource with ``--mixed``: their ``env.node_groups`` entry."""


def worker_resources(mixed: bool) -> dict[str, float]:
    return {NODE_RESOURCE: 1, **({ALT_RESOURCE: 1} if mixed else {})}


def start_cluster(nodes: int, mixed: bool) -> Any:
    """A head and ``nodes - 1`` workers on this machine, each with one ``mcprl_env``; connected."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {NODE_RESOURCE: 1}})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=1, resources=worker_resources(mixed))
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    return cluster


def marked_processes(run_id: str) -> set[int]:
    """Host processes of an environment of run ``run_id``: they carry ``MCPRL_ENV_ID``, and their
    ``HOME`` lies in the run's directory (local and bwrap: ``<root>/<run_id>/<env_id>/home``), so a
    run beside this one is not counted."""
    import psutil

    from actors.provisioners.local import ENV_MARKER

    found = set()
    for proc in psutil.process_iter():
        try:
            environ = proc.environ()
            if (
                ENV_MARKER in environ
                and f"/{run_id}/" in environ.get("HOME", "")
                and proc.status() != psutil.STATUS_ZOMBIE
            ):
                found.add(proc.pid)
        except psutil.Error:
            continue
    return found


async def run(args: argparse.Namespace) -> str:
    import ray
    from transformers import AutoTokenizer

    from actors.env_front import EnvFront
    from actors.placement import join_env_nodes, start_env_agents
    from actors.provisioners.base import make_provisioner
    from actors.rollout import RolloutPipeline, env_config_resolver
    from policies.react import EpisodeLimits
    from policies.scripted import ScriptedEngine
    from policies.tokens import ChatRecorder
    from policies.types import SamplingConfig
    from specs.config import load_run_config
    from specs.registry import resolve_import
    from specs.servers import load_server_registries
    from specs.task import TaskSpec, load_tasks

    alt = "bwrap" if args.backend == "local" else "local"
    cfg = load_run_config(
        None,
        [
            f"env.node_resource={NODE_RESOURCE}",
            f"env.backend={args.backend}",
            f"env.max_live={args.max_live}",
            *([f"env.node_groups={{{ALT_RESOURCE}: {{backend: {alt}}}}}"] if args.mixed else []),
        ],
    )
    run_id = f"bench-nodes-{uuid.uuid4().hex[:8]}"
    tokenizer: Any = AutoTokenizer.from_pretrained(cfg.model.path)
    tasks = load_tasks(cfg.domain.tasks)[: args.tasks]
    respond = resolve_import(cfg.domain.expert or "", "domain.expert")  # the default config's: the calculator
    cluster = start_cluster(args.nodes, args.mixed)
    front: EnvFront | None = None
    handles: list[Any] = []
    try:
        front, handles = start_env_agents(cfg, run_id, tokenizer.all_special_tokens)
        first_nodes = set(front.loads)
        episodes_started, a_third_started = 0, anyio.Event()

        def engine_for(task: TaskSpec) -> ScriptedEngine:
            nonlocal episodes_started
            episodes_started += 1
            if episodes_started >= args.tasks * args.group_size // 3:
                a_third_started.set()
            return ScriptedEngine(tokenizer, respond, task)

        pipeline = RolloutPipeline(
            pool=front,
            gateway=front,
            evaluator=front,
            env_config_for=env_config_resolver(load_server_registries([cfg.domain.servers]), cfg.env),
            engine_for=engine_for,
            recorder_factory=lambda: ChatRecorder(tokenizer),
            acquire_workers=2 * args.nodes,
            run_workers=4 * args.nodes,
            eval_workers=args.nodes,
            retries=2,
        )
        groups: list[Any] = []
        started = time.perf_counter()

        async def collect() -> None:
            limits = EpisodeLimits()
            groups.extend(
                await pipeline.collect(tasks, args.group_size, SamplingConfig(temperature=0.0), limits)
            )

        async with anyio.create_task_group() as tg:  # the first round ("step")
            tg.start_soon(collect)
            if args.kill_node:
                with anyio.fail_after(600):
                    await a_third_started.wait()
                await kill_a_worker(cluster)
        joined: list[str] = []
        if args.kill_node:  # the node comes back and joins between the rounds, as between two steps
            cluster.add_node(num_cpus=1, resources=worker_resources(args.mixed))
            cluster.wait_for_nodes()
            for node, more in await join_env_nodes(front, cfg, run_id, tokenizer.all_special_tokens):
                joined.append(node)
                handles += more
        before_second = {n: load.episodes for n, load in front.loads.items()}
        await collect()  # the second round
        seconds = time.perf_counter() - started
        served = {n: load.episodes for n, load in front.loads.items()}  # the nodes alive at the end
        backends = {n: front.agent(n).backend for n in served}
        late = sum(served[n] - before_second.get(n, 0) for n in joined)
        await front.shutdown()
        for handle in handles:
            ray.kill(handle)
        front = None
        left: list[str] = [f"process {pid}" for pid in marked_processes(run_id)]
        for backend in cfg.env.backends():
            options = cfg.env.provisioner_options() if backend == cfg.env.backend else {}
            owned = await make_provisioner(backend, **options).list_owned(run_id)
            left += [f"{backend} env {env.env_id} ({env.data.get('env_dir', '')})" for env in owned]
        if left:
            print(f"left behind: {'; '.join(left)}", flush=True)
        leftovers = len(left)
    finally:
        if front is not None:
            await front.shutdown()
        ray.shutdown()
        cluster.shutdown()
    kept = [g for g in groups if g.dropped is None]
    episodes = sum(1 for g in kept for t in g.trajectories if t.score is not None)
    partial = sum(1 for g in kept if len(g.trajectories) != args.group_size)
    lost = sum(pipeline.metrics.lost.values())
    throughout = [served[n] for n in served if n in first_nodes]
    spread = max(throughout) / max(min(throughout), 1) if throughout else float("nan")
    print(
        f"{episodes} episodes in {seconds:.1f} s over {args.nodes} nodes; per node "
        f"{[(backends[n], served[n]) for n in served]}; lost by cause {pipeline.metrics.lost}; "
        f"groups dropped {len(groups) - len(kept)}; joined {len(joined)} node(s)",
        flush=True,
    )
    return (
        f"nodes={args.nodes} episodes={episodes} lost={lost} leftovers={leftovers} spread={spread:.2f} "
        f"partial={partial} joined={late}"
    )


async def kill_a_worker(cluster: Any) -> None:
    """Remove a worker node ungracefully: its raylet and every process of it killed."""
    victim = next(iter(cluster.worker_nodes))
    print(f"killing node {victim.unique_id} (its raylet and every process of it)", flush=True)
    await anyio.to_thread.run_sync(lambda: cluster.remove_node(victim, allow_graceful=False))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, help="run real episodes on a Ray cluster of this many nodes")
    parser.add_argument("--kill-node", action="store_true", help="--nodes: kill a worker node mid-run")
    parser.add_argument("--tasks", type=int, default=12, help="--nodes: calculator tasks (default 12)")
    parser.add_argument("--group-size", type=int, default=2, help="--nodes: episodes per task (default 2)")
    parser.add_argument("--max-live", type=int, default=4, help="--nodes: environments per node (default 4)")
    parser.add_argument("--backend", default="local", help="--nodes: provisioner backend (default local)")
    parser.add_argument(
        "--mixed", action="store_true", help="--nodes: the workers run the other backend of local/bwrap"
    )
