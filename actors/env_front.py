"""EnvFront: environments spread over the nodes of a cluster, each episode kept on one node.

Each node that hosts environments runs an *agent*: an ``EnvPool`` over that node's provisioner, an
``McpGateway`` and an ``Evaluator``, all three pinned to the node (``actors.placement``), because an
environment's processes, its MCP server processes and the evaluator's view of it must share a
host. The rollout pipeline sees the front in their place: it satisfies all three seams
(``EnvPoolSeam``, ``GatewaySeam``, ``EvaluatorSeam``). ``acquire`` places a new environment on a node
(``choose_node``: among the nodes with room, episodes in proportion to capacity, then the lowest
share in use, then one where an idle environment of the same configuration waits) and remembers it; every later call about that environment
(open, call, is_broken, close, evaluate, release) goes to the same node's agent.

Node loss: a call that fails because the node's agent is gone (``is_node_lost``: Ray's actor-died
and actor-unavailable errors) marks the node lost and raises ``NodeLost``, an ``InfraError``: the
episode is failed by infrastructure, so the pipeline runs it again on a fresh environment, which
is placed on a live node, or drops its group whole; nothing of a lost node is called again. The
environments the lost agent held die with its processes where the node died; where only the agent
died, its watchdog destroys them. A node that comes back joins again with ``join`` after its new
agent reaped what the old one left (``EnvPool.reap_leftovers``).
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from actors.errors import GatewayError, InfraError
from actors.seams import EnvPoolSeam, EvaluatorSeam, GatewaySeam
from policies.types import ToolResult, ToolSpec
from specs.cleanup_calls import CleanupCall
from specs.env import EnvConfig, EnvInfo, ServerLaunch
from specs.task import TaskSpec
from specs.trajectory import Score, Trajectory

logger = logging.getLogger(__name__)
T = TypeVar("T")


SAMPLED_NODES = 8
"""Nodes one placement compares on a large fleet (``EnvFront(choices=...)``)."""


class NodeLost(InfraError):
    """The node that held an environment (or was to create it) is gone."""

    cause = "node_lost"


@dataclass(frozen=True)
class EnvAgent:
    """One node's environment side: its pool, gateway and evaluator (plain objects or proxies)."""

    node: str
    pool: EnvPoolSeam
    gateway: GatewaySeam
    evaluator: EvaluatorSeam
    capacity: int
    """Its pool's ``max_live``."""
    backend: str | None = None
    """Its pool's backend: each config is handed over as that backend runs it
    (``EnvConfig.for_backend``: no image build off docker); ``None``: as given."""

    def fit(self, config: EnvConfig) -> EnvConfig:
        return config if self.backend is None else config.for_backend(self.backend)


@dataclass
class NodeLoad:
    """What the front knows of one node: environments held by episodes, idle ones per config key."""

    capacity: int
    held: int = 0
    idle: Counter[str] = field(default_factory=Counter)
    episodes: int = 0
    """Environments handed out on this node so far (the spread of a run)."""
    head_start: int = 0
    """Episodes placement counts that the node did not serve: one that joins a running front
    starts level with the least served node (``EnvFront.join``)."""

    @property
    def share(self) -> float:
        return self.held / max(self.capacity, 1)


def choose_node(loads: Mapping[str, NodeLoad], key: str, among: Sequence[str] | None = None) -> str:
    """The node for the next environment of config ``key``, of the nodes ``among`` (default: all):
    among the nodes with room (fewer held
    than their capacity; all nodes when none has room, whose pools then wait for a release), the
    fewest episodes so far per unit of capacity (a weighted round robin: a run's episodes spread in
    proportion to the nodes' capacities), then the lowest share of capacity held, then one where an
    idle environment of ``key`` waits (a reset instead of a create), then the name."""
    candidates = list(loads) if among is None else list(among)
    if not candidates:
        raise NodeLost("no node is left to place an environment on")
    roomy = [n for n in candidates if loads[n].held < loads[n].capacity] or candidates

    def preference(node: str) -> tuple[float, float, bool, str]:
        load = loads[node]
        served = (load.episodes + load.head_start) / max(load.capacity, 1)
        return (served, load.share, load.idle[key] == 0, node)

    return min(roomy, key=preference)


def is_node_lost(error: BaseException) -> bool:
    """Whether ``error`` says the agent's actor is gone (its node died, or the actor with it)."""
    names = {cls.__name__ for cls in type(error).__mro__}
    return bool(names & {"RayActorError", "ActorDiedError", "ActorUnavailableError", "NodeDiedError"})


@contextlib.contextmanager
def _gone_with(node: str) -> Iterator[None]:
    """Around closing or releasing an environment: on a lost node there is nothing left to close
    or release (its sessions and environments went with it), so that is done, not a failure."""
    try:
        yield
    except NodeLost:
        logger.info("node %s is lost: nothing of it to close or release", node)


def _prewarming(config: EnvConfig, count: int) -> Callable[[EnvAgent], Awaitable[int]]:
    return lambda agent: agent.pool.prewarm(agent.fit(config), count)


class EnvFront:
    """Places environments on nodes by load and routes each environment's calls to its node."""

    def __init__(
        self, agents: Sequence[EnvAgent], *, reuse: bool = True, choices: int = SAMPLED_NODES, seed: int = 0
    ) -> None:
        """``choices``: on a fleet of more than twice as many nodes, each placement looks at that
        many nodes drawn at random plus (as many) nodes where an idle environment of the config
        waits, instead of at every node (the power of d choices: nearly the balance of looking at
        all, at a cost that does not grow with the fleet)."""
        if not agents:
            raise ValueError("EnvFront needs at least one node's agent")
        self._agents: dict[str, EnvAgent] = {}
        self.loads: dict[str, NodeLoad] = {}
        self.lost: dict[str, str] = {}
        """Lost nodes and why."""
        self._placed: dict[str, tuple[str, str]] = {}
        """Env id -> (its node, the key of the config it was asked for)."""
        self._reuse = reuse
        self._choices, self._rng = choices, random.Random(seed)
        self._names: list[str] = []
        self._warm: dict[str, dict[str, None]] = {}
        """Config key -> the nodes where an idle environment of it waits (an ordered set)."""
        for agent in agents:
            self.join(agent)

    def join(self, agent: EnvAgent) -> None:
        """Take ``agent``'s node (new, or back after a loss) into placement. A node that joins a
        running front counts as many episodes per capacity as the least served node, so it takes
        its share of the next episodes rather than all of them."""
        served = min(
            ((n.episodes + n.head_start) / max(n.capacity, 1) for n in self.loads.values()), default=0.0
        )
        self._agents[agent.node] = agent
        self.loads[agent.node] = NodeLoad(capacity=agent.capacity, head_start=round(served * agent.capacity))
        self.lost.pop(agent.node, None)
        self._names = list(self.loads)

    def agent(self, node: str) -> EnvAgent:
        """The agent of ``node`` (live or lost)."""
        return self._agents[node]

    def node_of(self, env_id: str) -> str:
        """The node that holds environment ``env_id``; ``GatewayError`` when the front placed none such."""
        try:
            return self._placed[env_id][0]
        except KeyError:
            raise GatewayError(f"env {env_id} was not placed by this front (or was released)") from None

    # -- EnvPoolSeam -----------------------------------------------------------------------------

    async def acquire(self, config: EnvConfig, task: TaskSpec) -> EnvInfo:
        key = config.key()
        node = choose_node(self.loads, key, self._candidates(key))
        if self.loads[node].held >= self.loads[node].capacity:  # no room in the sample: look at all
            node = choose_node(self.loads, key)
        load = self.loads[node]
        load.held += 1
        reused = load.idle[key] > 0
        if reused:
            self._idle(node, key, -1)
        try:
            env = await self._on(node, lambda a: a.pool.acquire(a.fit(config), task))
        except BaseException:
            if node in self.loads:
                load.held -= 1
                if reused:
                    self._idle(node, key, +1)
            raise
        load.episodes += 1
        self._placed[env.env_id] = (node, key)
        return env

    async def release(
        self,
        env: EnvInfo,
        task: TaskSpec,
        *,
        broken: bool = False,
        tool_cleanups: Sequence[CleanupCall] = (),
    ) -> None:
        node, key = self._placed.pop(env.env_id, (None, ""))
        if node is None or node in self.lost:
            return  # a lost node's environments went with it (or with its agent's watchdog)
        load = self.loads[node]
        load.held -= 1
        with _gone_with(node):
            await self._on(
                node, lambda a: a.pool.release(env, task, broken=broken, tool_cleanups=tool_cleanups)
            )
            if self._reuse and not broken:
                self._idle(node, key, +1)

    async def prewarm(self, config: EnvConfig, count: int) -> int:
        """``count`` idle environments of ``config``, spread over the live nodes by capacity."""
        nodes = sorted(self.loads, key=lambda n: (-self.loads[n].capacity, n))
        shares = {
            n: count * self.loads[n].capacity // sum(self.loads[m].capacity for m in nodes) for n in nodes
        }
        for n in nodes[: count - sum(shares.values())]:
            shares[n] += 1
        made = 0
        for node, share in shares.items():
            if share:
                warmed = await self._on(node, _prewarming(config, share))
                self._idle(node, config.key(), warmed)
                made += warmed
        return made

    async def sweep(self) -> int:
        return sum([await self._on(n, lambda a: a.pool.sweep()) for n in list(self.loads)])

    async def reap_leftovers(self) -> int:
        return sum([await self._on(n, lambda a: a.pool.reap_leftovers()) for n in list(self.loads)])

    # -- GatewaySeam -----------------------------------------------------------------------------

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
    ) -> list[ToolSpec]:
        return await self._on(
            self.node_of(env.env_id),
            lambda a: a.gateway.open(
                env, servers, allowed_tools, budget_s=budget_s, route=route, top_k=top_k, query=query
            ),
        )

    async def call(self, env_id: str, name: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        return await self._on(
            self.node_of(env_id), lambda a: a.gateway.call(env_id, name, arguments, timeout_s)
        )

    async def is_broken(self, env_id: str) -> bool:
        node = self.node_of(env_id)
        return node in self.lost or await self._on(node, lambda a: a.gateway.is_broken(env_id))

    async def close(self, env_id: str, keep_servers: bool = False) -> None:
        node = self.node_of(env_id)
        with _gone_with(node):
            await self._on(node, lambda a: a.gateway.close(env_id, keep_servers))

    # -- EvaluatorSeam ---------------------------------------------------------------------------

    async def evaluate(self, task: TaskSpec, trajectory: Trajectory, env: EnvInfo) -> Score:
        return await self._on(self.node_of(env.env_id), lambda a: a.evaluator.evaluate(task, trajectory, env))

    # -- the rest --------------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Shut every live node's agent down: its gateway first (its servers run in the pool's
        environments), then its pool (every environment destroyed); after a loss each live agent
        also reaps the owner-dead environments on its host (a restarted node's dead predecessor's).
        Elsewhere a lost node's leftovers are its watchdog's and the next run's reaper's."""
        for node in list(self.loads):
            agent = self._agents[node]
            # the actors' own method, not a seam's: an in-process gateway stops by leaving `running()`
            for part in (agent.gateway, agent.pool):
                try:
                    await cast(Any, part).shutdown()
                except Exception:  # an agent that died has nothing left to stop
                    logger.warning(
                        "shutdown of node %s's %s failed", node, type(part).__name__, exc_info=True
                    )
            if self.lost:  # a lost agent's environments on a host this agent shares (a restarted
                # node) whose owner was still dying when this one joined and reaped
                try:
                    await agent.pool.reap_leftovers()
                except Exception:
                    logger.warning("node %s could not reap a lost node's leftovers", node, exc_info=True)

    def _candidates(self, key: str) -> list[str] | None:
        """The nodes one placement looks at: all (``None``) on a small fleet, else ``choices``
        drawn at random and up to as many where an idle environment of ``key`` waits."""
        if len(self._names) <= 2 * self._choices:
            return None
        warm = list(self._warm.get(key, {}))[: self._choices]
        return self._rng.sample(self._names, self._choices) + warm

    def _idle(self, node: str, key: str, delta: int) -> None:
        idle = self.loads[node].idle
        idle[key] += delta
        nodes = self._warm.setdefault(key, {})
        if idle[key] > 0:
            nodes[node] = None
        else:
            nodes.pop(node, None)

    async def _on(self, node: str, call: Callable[[EnvAgent], Awaitable[T]]) -> T:
        """``call`` on ``node``'s agent; a lost agent marks the node lost and raises ``NodeLost``."""
        if node in self.lost:
            raise NodeLost(f"node {node} was lost: {self.lost[node]}")
        try:
            return await call(self._agents[node])
        except Exception as e:
            if not is_node_lost(e):
                raise
            self._lose(node, f"{type(e).__name__}: {e}")
            raise NodeLost(f"node {node} was lost: {self.lost[node]}") from e

    def _lose(self, node: str, why: str) -> None:
        if node in self.lost:
            return
        logger.warning("env node %s lost (%s); its environments' episodes fail, it gets no more", node, why)
        self.lost[node] = why.splitlines()[0][:300]
        self.loads.pop(node, None)
        self._names = list(self.loads)
        for nodes in self._warm.values():
            nodes.pop(node, None)
