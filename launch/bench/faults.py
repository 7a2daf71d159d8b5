"""Around the real pipeline of ``launch/bench/pipeline.py``: fault injection, CPU accounting, leftovers.

``FaultyGateway`` wraps the real ``McpGateway`` and injects one fault (kill the environment's
servers, destroy the environment, or kill the simulated generator) into a share ``p`` of the
episodes; ``CpuSampler`` reads CPU seconds of this process, its process tree (the MCP servers) and
the machine, for any window afterwards; ``leftovers`` counts what a run left behind.
"""

from __future__ import annotations

import os
import random
import resource
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import psutil

from actors.mcp_gateway import McpGateway
from actors.provisioners.local import ENV_MARKER, LocalProvisioner, kill_marked_processes
from launch.bench.sim_generator import SimulatedGenerator
from policies.types import ToolResult, ToolSpec
from specs.env import EnvInfo, ServerLaunch

FAULTS = ("server", "env", "generator")


class FaultyGateway:
    """``McpGateway`` plus fault injection: an environment drawn at ``open`` (probability ``p``)
    gets one fault of ``FAULTS`` just before its first tool call runs. Times every ``open``, and
    counts the calls that found their server dead (``lost["server_or_env"]``)."""

    def __init__(
        self,
        gateway: McpGateway,
        provisioner: LocalProvisioner,
        sim: SimulatedGenerator,
        tg: anyio.abc.TaskGroup,
        *,
        p: float,
        restart_s: float,
        rng: random.Random,
    ) -> None:
        self._gateway, self._provisioner, self._sim, self._tg = gateway, provisioner, sim, tg
        self._p, self._restart_s, self._rng = p, restart_s, rng
        self._planned: dict[str, tuple[str, EnvInfo]] = {}
        self.injected: dict[str, int] = dict.fromkeys(FAULTS, 0)
        self.lost: dict[str, int] = {}
        self.open_s: list[float] = []

    async def open(
        self, env: EnvInfo, servers: Sequence[ServerLaunch], *args: Any, **kw: Any
    ) -> list[ToolSpec]:
        started = time.perf_counter()
        tools = await self._gateway.open(env, servers, *args, **kw)
        self.open_s.append(time.perf_counter() - started)
        if self._rng.random() < self._p:
            self._planned[env.env_id] = (self._rng.choice(FAULTS), env)
        return tools

    async def call(self, env_id: str, name: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        planned = self._planned.pop(env_id, None)
        if planned is not None:
            await self._inject(*planned)
        result = await self._gateway.call(env_id, name, arguments, timeout_s)
        if result.error_kind == "server_died":
            self.lost["server_or_env"] = self.lost.get("server_or_env", 0) + 1
        return result

    async def is_broken(self, env_id: str) -> bool:
        return await self._gateway.is_broken(env_id)

    async def close(self, env_id: str, keep_servers: bool = False) -> None:
        self._planned.pop(env_id, None)
        await self._gateway.close(env_id, keep_servers)

    async def _inject(self, kind: str, env: EnvInfo) -> None:
        self.injected[kind] += 1
        if kind == "server":
            await anyio.to_thread.run_sync(kill_marked_processes, env.env_id)
        elif kind == "env":
            await self._provisioner.destroy(env)
        else:
            self._sim.kill(f"fault injected by the benchmark (env {env.env_id})")
            self._tg.start_soon(self._restart)

    async def _restart(self) -> None:
        await anyio.sleep(self._restart_s)
        self._sim.restart()


class CpuSampler:
    """CPU seconds against the clock, for any window later: this process's (all threads), its
    process tree's (itself, its live and reaped children: the MCP servers), the machine's busy time."""

    def __init__(self, every_s: float = 0.5) -> None:
        self.every_s = every_s
        self.samples = [self.sample()]

    @staticmethod
    def sample() -> tuple[float, float, float, float]:
        tree = time.process_time() + children_cpu_s()
        for child in psutil.Process().children(recursive=True):
            try:
                tree += sum(child.cpu_times()[:2])
            except psutil.Error:
                continue
        machine = psutil.cpu_times()  # guest time is already inside user and nice
        busy = sum(getattr(machine, k, 0.0) for k in ("user", "nice", "system", "irq", "softirq", "steal"))
        return time.perf_counter(), time.process_time(), tree, busy

    async def run(self) -> None:
        while True:
            await anyio.sleep(self.every_s)
            self.samples.append(self.sample())

    def at(self, t: float) -> tuple[float, ...]:
        """(own, tree, machine) CPU seconds at clock ``t``, interpolated between samples."""
        self.samples.append(self.sample())
        before = max((s for s in self.samples if s[0] <= t), default=self.samples[0])
        after = min((s for s in self.samples if s[0] >= t), default=self.samples[-1])
        w = 0.0 if after[0] == before[0] else (t - before[0]) / (after[0] - before[0])
        return tuple(b + (a - b) * w for a, b in zip(after[1:], before[1:], strict=True))

    def window(self, start: float, end: float, turns: float, turns_per_episode: int) -> dict[str, float]:
        """``turn``: this process's CPU s per turn; ``episode``: its tree's CPU s per episode;
        ``free``: cores the rest of the machine left idle (at least 0.1), over ``(start, end]``."""
        (own0, tree0, machine0), (own1, tree1, machine1) = self.at(start), self.at(end)
        cores = float(os.cpu_count() or 1)
        others = max(0.0, (machine1 - machine0) - (tree1 - tree0)) / (end - start)
        if turns <= 0:
            return {"turn": 0.0, "episode": 0.0, "free": cores}
        episode = (tree1 - tree0) / (turns / turns_per_episode)
        return {"turn": (own1 - own0) / turns, "episode": episode, "free": max(0.1, cores - others)}


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def leftovers(root: Path, run_id: str) -> int:
    """The run's environments still on disk, and live processes started in one of them (the local
    backend points their HOME into ``<root>/<run_id>/<env_id>/home``)."""
    found = len(list((root / run_id).glob("*/label.json")))
    for proc in psutil.process_iter():
        try:
            environ = proc.environ()
            if ENV_MARKER in environ and f"/{run_id}/" in environ.get("HOME", ""):
                found += proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            continue
    return found
