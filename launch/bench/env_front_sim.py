"""Simulation: the environment front placing episodes over 100+ nodes (quality and throughput).

    python -m launch.bench.env_front_sim [--nodes 100,400,1600] [--episodes 20000] [--quick]

These machines have one host, so placement at scale is simulated: the real ``EnvFront`` (and its
``choose_node``) over in-memory agents, one per node, whose pools hand out an environment at once;
the episodes' durations run on a virtual clock. Nodes differ as a real fleet does: capacities of
4, 8 or 16 environments, and a speed per node (an episode takes ``1 / speed`` time units on
average, exponentially distributed; speeds 0.5-2). The driver keeps ``concurrency`` episodes in
flight (90% of the fleet's capacity): whenever one ends, its environment is released and the next
one acquired, always through the front.

Per fleet size, side by side on the same fleet and seed, two placements: ``all`` (every placement
compares every node) and ``sampled`` (the front's default on a large fleet: 8 nodes drawn at
random plus up to 8 where an idle environment of the configuration waits). For each: placement
quality (``spread``: max/min over the nodes of episodes per unit of throughput, capacity x speed,
1.0 when every node is used alike; ``over``: environments a node held beyond its capacity at any
time, where its pool would have made the episode wait; ``reuse``: share of acquisitions that found
an idle environment of the task's configuration on their node, with 20 configurations) and the
front's own cost (wall time of ``acquire`` + ``release`` on the in-memory agents: microseconds and
episodes per second, nothing else in the loop). One line per fleet and placement:
``env_front_sim: nodes=N placement=P episodes=E spread=.. over=.. reuse=.. front_us_per_episode=..
front_episodes_per_s=..``, then per fleet the ratio of the two placements' costs.
"""

from __future__ import annotations

import argparse
import heapq
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from actors.env_front import SAMPLED_NODES, EnvAgent, EnvFront
from policies.types import ToolResult, ToolSpec
from specs.env import EnvConfig, EnvInfo, ServerLaunch
from specs.task import TaskSpec
from specs.trajectory import Score, Trajectory

PLACEMENTS = ("all", "sampled")
CONFIGS = 20
"""Distinct environment configurations among the tasks (reuse needs an idle one of the same)."""


class SimAgent:
    """One node's pool (and, unused here, gateway and evaluator): environments handed out at once,
    reused when an idle one of the configuration waits, as ``EnvPool`` does."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.idle: dict[str, int] = {}
        self.made = self.reused = 0

    async def acquire(self, config: EnvConfig, task: TaskSpec) -> EnvInfo:
        key = config.key()
        if self.idle.get(key, 0) > 0:
            self.idle[key] -= 1
            self.reused += 1
        else:
            self.made += 1
        return EnvInfo(env_id=f"{self.node}-{self.made}-{self.reused}", run_id="sim", backend="sim",
                       key=key, workdir="/", created_at=0.0)  # fmt: skip

    async def release(
        self, env: EnvInfo, task: TaskSpec, *, broken: bool = False, tool_cleanups: Any = ()
    ) -> None:
        self.idle[env.key] = self.idle.get(env.key, 0) + 1

    async def prewarm(self, config: EnvConfig, count: int) -> int:
        return 0

    async def sweep(self) -> int:
        return 0

    async def reap_leftovers(self) -> int:
        return 0

    async def open(
        self, env: EnvInfo, servers: Sequence[ServerLaunch], *args: Any, **kwargs: Any
    ) -> list[ToolSpec]:
        return []

    async def call(self, env_id: str, name: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        raise NotImplementedError("the simulation places environments; it runs no tools")

    async def is_broken(self, env_id: str) -> bool:
        return False

    async def close(self, env_id: str, keep_servers: bool = False) -> None:
        return None

    async def evaluate(self, task: TaskSpec, trajectory: Trajectory, env: EnvInfo) -> Score:
        raise NotImplementedError("the simulation places environments; it evaluates nothing")


@dataclass
class FleetResult:
    nodes: int
    placement: str
    episodes: int
    spread: float
    over: int
    reuse: float
    front_s: float

    def line(self) -> str:
        return (
            f"env_front_sim: nodes={self.nodes} placement={self.placement} episodes={self.episodes} "
            f"spread={self.spread:.2f} "
            f"over={self.over} reuse={self.reuse:.2f} front_us_per_episode={1e6 * self.front_s / self.episodes:.1f} "
            f"front_episodes_per_s={self.episodes / self.front_s:.0f}"
        )


async def simulate(nodes: int, episodes: int, placement: str, seed: int = 0) -> FleetResult:
    rng = random.Random(seed)
    capacity = {f"n{i:04d}": rng.choice((4, 8, 16)) for i in range(nodes)}
    speed = {n: rng.uniform(0.5, 2.0) for n in capacity}
    agents = {n: SimAgent(n) for n in capacity}
    choices = nodes if placement == "all" else SAMPLED_NODES
    front = EnvFront(
        [EnvAgent(n, a, a, a, capacity[n]) for n, a in agents.items()], choices=choices, seed=seed
    )
    configs = [EnvConfig(servers=(ServerLaunch(name=f"s{i}", command="srv"),)) for i in range(CONFIGS)]
    tasks = [TaskSpec(instance_id=f"t{i}", instruction="?") for i in range(CONFIGS)]
    concurrency = int(0.9 * sum(capacity.values()))
    running: list[tuple[float, int, EnvInfo, int]] = []  # (ends at, tie, env, config index)
    now, started, over, front_s = 0.0, 0, 0, 0.0
    while started < episodes or running:
        if started < episodes and len(running) < concurrency:
            i = rng.randrange(CONFIGS)
            t0 = time.perf_counter()
            env = await front.acquire(configs[i], tasks[i])
            front_s += time.perf_counter() - t0
            node = front.node_of(env.env_id)
            over = max(over, front.loads[node].held - capacity[node])
            heapq.heappush(running, (now + rng.expovariate(speed[node]), started, env, i))
            started += 1
            continue
        now, _, env, i = heapq.heappop(running)
        t0 = time.perf_counter()
        await front.release(env, tasks[i])
        front_s += time.perf_counter() - t0
    per_throughput = [front.loads[n].episodes / (capacity[n] * speed[n]) for n in capacity]
    reused = sum(a.reused for a in agents.values())
    return FleetResult(
        nodes=nodes,
        placement=placement,
        episodes=episodes,
        spread=max(per_throughput) / max(min(per_throughput), 1e-9),
        over=over,
        reuse=reused / episodes,
        front_s=front_s,
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m launch.bench.env_front_sim", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--nodes", default="100,400,1600", help="fleet sizes, comma-separated")
    parser.add_argument("--episodes", type=int, default=20000, help="episodes per fleet")
    parser.add_argument("--quick", action="store_true", help="fleets of 100 and 200 nodes, 3000 episodes")
    args = parser.parse_args(argv)
    if args.quick:
        args.nodes, args.episodes = "100,200", 3000
    args.fleets = [int(n) for n in args.nodes.split(",") if n.strip()]
    if not args.fleets or min(args.fleets) < 1 or args.episodes < 1:
        parser.error("--nodes needs sizes >= 1 and --episodes >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> list[FleetResult]:
    args = parse_args(argv)
    results = []
    for n in args.fleets:
        pair = [anyio.run(simulate, n, args.episodes, placement) for placement in PLACEMENTS]
        for r in pair:
            print(r.line(), flush=True)
        print(
            f"env_front_sim: nodes={n} cost_all_x_sampled={pair[0].front_s / pair[1].front_s:.1f}", flush=True
        )
        results += pair
    return results


if __name__ == "__main__":
    main()
