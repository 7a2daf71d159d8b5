"""Benchmark: what an environment costs on each provisioner backend, side by side in one run.

    python -m launch.bench.env_pool [--quick] [--backends local,bwrap,bwrap-rlimits,docker] [--samples 20]
        [--live 8]
    python -m launch.bench.env_pool --nodes 3 [--kill-node]   (several Ray nodes: launch/bench/env_nodes.py)

Run it from the project root (the calculator's registry names its venv relative to it; ``make
servers`` builds ``.cache/servers/calculator``). Per backend, over ``--samples`` rounds (after one
untimed warm-up round, which also builds the docker host-root image if the engine lacks it):

- ``create``: ``provisioner.create`` of a cold environment;
- ``acquire``: ``EnvPool.acquire`` of an idle, already reset environment of the same key (what a
  task gets from a warm pool: the health check included, no prepare hooks);
- ``reset`` and ``destroy``: ``provisioner.reset`` / ``provisioner.destroy`` of a fresh one.

Then density: ``--live`` environments each run one real MCP server (the calculator, started
through ``McpGateway`` as an episode starts it, and called once). The memory they add is the sum
of the PSS (and USS) of the host processes that belong to them: those carrying the environment's
marker ``MCPRL_ENV_ID`` (the server; bwrap's sandbox processes), those whose command line names the
environment (docker: the stdio bridge on the host; Podman's ``conmon`` monitors, one per container
and one per exec) and a container's init (docker: ``sleep infinity``). ``MiB/env`` is that PSS per environment and
``envs/GiB`` = 1024 / ``MiB/env``. For docker the container's cgroup memory, as the engine's stats
API reports it, is shown too (``cgroup``; it includes page cache charged to the container). The
gateway's client-side state in this process is not counted.

Then server reuse, side by side: ``--samples`` episode starts on one reused environment, each
``EnvPool.acquire`` + ``McpGateway.open`` (what the rollout's acquire stage does) followed by one
call, ``close`` and ``release``, as the pipeline runs them. ``fresh``: the server is started again
for each episode (``close(keep_servers=False)``); ``kept``: the calculator as a ``keep_alive``
server, parked by ``close(keep_servers=True)`` and taken over by the next ``open`` (the first start
is a fresh one). ``start`` is the p50 of acquire + open; ``cpu`` the CPU time per episode of this
process and its descendants, the servers included: on ``local`` only, where each server is a
child that is waited for (a killed sandbox's processes are never waited for, so their time is
lost to the count, and a container's are not descendants at all; ``nan`` there). docker's reset restarts the container, so nothing is kept
there (``Provisioner.keeps_servers``).

Prints an aligned table, the ratios of each backend's p50s and memory to ``local``'s, and one line
per backend: ``env_pool: backend=B create_p50_ms=.. acquire_p50_ms=.. reset_p50_ms=..
destroy_p50_ms=.. envs_per_gib=.. start_fresh_p50_ms=.. start_kept_p50_ms=.. start_speedup=..
cpu_fresh_ms=.. cpu_kept_ms=..`` (``env_pool: backend=B skipped: <why>`` when its runtime is
missing). ``--quick`` (3 samples, 2 live) is what the test suite runs. Every environment is created
under one fresh run id and destroyed on the way out, also on an error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec
import psutil

from actors.env_pool import EnvPool
from actors.errors import EnvError
from actors.mcp_gateway import McpGateway
from actors.provisioners.base import Provisioner, make_provisioner
from actors.provisioners.local import ENV_MARKER
from launch.bench import env_nodes
from specs.env import EnvConfig, EnvInfo, ServerLaunch
from specs.servers import load_server_registry
from specs.task import TaskSpec

BACKENDS = ("local", "bwrap", "bwrap-rlimits", "docker")
VARIANTS: dict[str, tuple[str, dict[str, object]]] = {"bwrap-rlimits": ("bwrap", {"cgroups": False})}
"""A backend under other options: ``bwrap-rlimits`` is bwrap without a cgroup per environment
(its limits as rlimits, as on a host where no cgroup can be made), beside ``bwrap``'s cgroups."""
OPERATIONS = ("create", "acquire", "reset", "destroy")
REUSE_ARMS = ("fresh", "kept")
CALCULATOR_REGISTRY = "specs/domains/calculator/servers.json"
CLEANUP_TIMEOUT_S = 120.0


@dataclass
class BackendResult:
    backend: str
    skipped: str | None = None
    ms: dict[str, list[float]] = field(default_factory=lambda: {op: [] for op in OPERATIONS})
    pss_mib: float = math.nan  # per environment
    uss_mib: float = math.nan
    cgroup_mib: float | None = None
    start_ms: dict[str, list[float]] = field(default_factory=lambda: {arm: [] for arm in REUSE_ARMS})
    cpu_ms: dict[str, float] = field(default_factory=lambda: dict.fromkeys(REUSE_ARMS, math.nan))


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), linearly interpolated between ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within 0..100, got {q}")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def envs_per_gib(mib_per_env: float) -> float:
    return 1024 / mib_per_env if mib_per_env > 0 else math.nan


def summary_line(result: BackendResult) -> str:
    if result.skipped is not None:
        return f"env_pool: backend={result.backend} skipped: {result.skipped}"
    p50s = " ".join(f"{op}_p50_ms={percentile(result.ms[op], 50):.2f}" for op in OPERATIONS)
    fresh, kept = (percentile(result.start_ms[arm], 50) for arm in REUSE_ARMS)
    reuse = (
        f"start_fresh_p50_ms={fresh:.2f} start_kept_p50_ms={kept:.2f} start_speedup={fresh / kept:.1f} "
        f"cpu_fresh_ms={result.cpu_ms['fresh']:.1f} cpu_kept_ms={result.cpu_ms['kept']:.1f}"
    )
    return (
        f"env_pool: backend={result.backend} {p50s} envs_per_gib={envs_per_gib(result.pss_mib):.2f} {reuse}"
    )


# -- measuring --------------------------------------------------------------------------------


async def timed_ms(awaitable: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = await awaitable
    return value, (time.perf_counter() - start) * 1000


async def lifecycle(provisioner: Provisioner, config: EnvConfig, run_id: str, result: BackendResult) -> None:
    """One round: create, reset and destroy a cold environment, each timed."""
    env, ms = await timed_ms(provisioner.create(config, run_id))
    result.ms["create"].append(ms)
    result.ms["reset"].append((await timed_ms(provisioner.reset(env)))[1])
    result.ms["destroy"].append((await timed_ms(provisioner.destroy(env)))[1])


async def warm_acquires(
    provisioner: Provisioner, config: EnvConfig, run_id: str, samples: int, result: BackendResult
) -> None:
    """``samples`` acquires of the pool's one idle environment (each release resets it)."""
    task = TaskSpec(instance_id="bench-env-pool", instruction="benchmark")
    pool = EnvPool(provisioner, run_id, max_live=1)
    try:
        if await pool.prewarm(config, 1) != 1:
            raise EnvError(f"{provisioner.name}: prewarm created no environment")
        for _ in range(samples):
            env, ms = await timed_ms(pool.acquire(config, task))
            result.ms["acquire"].append(ms)
            await pool.release(env, task)
        if pool.stats()["created"] != 1:
            raise EnvError(f"{provisioner.name}: the pool created instead of reusing: {pool.stats()}")
    finally:
        with anyio.CancelScope(shield=True):
            await pool.shutdown()


def cpu_seconds() -> float:
    """CPU time (user + system) of this process, its reaped children and its live descendants."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:4])  # user, system, children_user, children_system
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            continue  # gone meanwhile: its parent reaps it, and counts it, later
    return total


async def episode_starts(
    provisioner: Provisioner, server: ServerLaunch, run_id: str, samples: int, keep_servers: bool
) -> tuple[list[float], float]:
    """``samples`` episodes on one reused environment, as the pipeline runs them: the milliseconds
    of each acquire + open, and the CPU milliseconds per episode (see the module docstring)."""
    kept = msgspec.structs.replace(server, keep_alive=True)
    config, task = EnvConfig(servers=(kept,)), TaskSpec(instance_id="bench-env-pool", instruction="benchmark")
    pool = EnvPool(provisioner, run_id, max_live=1)
    starts: list[float] = []
    try:
        async with McpGateway.running(provisioner_for=lambda _: provisioner) as gateway:
            if await pool.prewarm(config, 1) != 1:
                raise EnvError(f"{provisioner.name}: prewarm created no environment")
            cpu_before = cpu_seconds()
            for _ in range(samples):
                started = time.perf_counter()
                env = await pool.acquire(config, task)
                await gateway.open(env, [kept])
                starts.append((time.perf_counter() - started) * 1000)
                answer = await gateway.call(env.env_id, "calculator__calculate", {"expression": "6*7"}, 30)
                if answer.text != "42":
                    raise EnvError(
                        f"{provisioner.name} env {env.env_id}: calculator answered {answer.text!r}"
                    )
                await gateway.close(env.env_id, keep_servers=keep_servers)
                await pool.release(env, task)
            cpu_ms = (
                (cpu_seconds() - cpu_before) * 1000 / samples if provisioner.name == "local" else math.nan
            )
            reused = gateway.stats()["servers_kept"]
            if keep_servers and provisioner.keeps_servers and reused != samples - 1:
                raise EnvError(f"{provisioner.name}: {reused} of {samples - 1} servers were kept")
    finally:
        with anyio.CancelScope(shield=True):
            await pool.shutdown()
    return starts, cpu_ms


def env_processes(env: EnvInfo) -> list[psutil.Process]:
    """Host processes that belong to ``env`` (see the module docstring)."""
    pids: set[int] = set()
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            if proc.environ().get(ENV_MARKER) == env.env_id or any(env.env_id in a for a in proc.cmdline()):
                pids.add(proc.pid)
        except (psutil.Error, OSError):
            continue
    pids.update(p for p in [container_info(env).get("State", {}).get("Pid")] if p)
    found = []
    for pid in sorted(pids):
        try:
            found.append(psutil.Process(pid))
        except psutil.Error:
            continue
    return found


def container_info(env: EnvInfo) -> dict[str, Any]:
    if env.backend != "docker":
        return {}
    from actors.provisioners.docker import engine_client

    return engine_client(env.data.get("docker_url")).api.inspect_container(env.data["container"])


def container_memory_mib(env: EnvInfo) -> float | None:
    """The container's cgroup memory use from the engine's stats API; None when not reported."""
    if env.backend != "docker":
        return None
    from actors.provisioners.docker import engine_client

    stats = engine_client(env.data.get("docker_url")).api.stats(env.data["container"], stream=False)
    usage = (stats.get("memory_stats") or {}).get("usage")
    return usage / 2**20 if usage else None


def memory_mib(envs: Sequence[EnvInfo]) -> tuple[float, float, float | None]:
    """(PSS, USS, cgroup) in MiB per environment, averaged over ``envs``."""
    pss = uss = 0
    for env in envs:
        for proc in env_processes(env):
            try:
                info = proc.memory_full_info()
            except psutil.Error:
                continue
            pss, uss = pss + info.pss, uss + info.uss
    cgroups = [c for env in envs if (c := container_memory_mib(env)) is not None]
    cgroup = sum(cgroups) / len(envs) if len(cgroups) == len(envs) else None
    return pss / 2**20 / len(envs), uss / 2**20 / len(envs), cgroup


async def density(
    provisioner: Provisioner, config: EnvConfig, server: ServerLaunch, run_id: str, live: int
) -> tuple[float, float, float | None]:
    envs = [await provisioner.create(config, run_id) for _ in range(live)]
    async with McpGateway.running(provisioner_for=lambda _: provisioner) as gateway:
        for env in envs:
            await gateway.open(env, [server])
            answer = await gateway.call(env.env_id, "calculator__calculate", {"expression": "6*7"}, 30)
            if answer.text != "42":
                raise EnvError(f"{provisioner.name} env {env.env_id}: calculator answered {answer.text!r}")
        return await anyio.to_thread.run_sync(memory_mib, envs)


async def available(provisioner: Provisioner, config: EnvConfig, run_id: str) -> str | None:
    """Why the backend cannot run here (its runtime is missing), or None. The untimed warm-up."""
    try:
        env = await provisioner.create(config, run_id)
        ran = await provisioner.exec(env, ["true"], timeout_s=30)
        await provisioner.destroy(env)
    except (EnvError, OSError) as e:
        return str(e).splitlines()[0]
    return None if ran.returncode == 0 else f"a process does not start: {ran.stderr.strip()[:200]}"


async def cleanup(provisioner: Provisioner, run_id: str) -> int:
    """Destroy whatever this run left on the backend; how many."""
    left = 0
    with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT_S):
        try:
            for env in await provisioner.list_owned(run_id):
                await provisioner.destroy(env)
                left += 1
        except EnvError:
            pass  # the runtime is missing: nothing was created
    return left


async def bench_backend(backend: str, server: ServerLaunch, args: argparse.Namespace) -> BackendResult:
    result = BackendResult(backend)
    name, options = VARIANTS.get(backend, (backend, {}))
    provisioner = make_provisioner(name, **options)
    config = EnvConfig(servers=(server,))
    try:
        result.skipped = await available(provisioner, config, args.run_id)
        if result.skipped is not None:
            return result
        for _ in range(args.samples):
            await lifecycle(provisioner, config, args.run_id, result)
        await warm_acquires(provisioner, config, args.run_id, args.samples, result)
        for arm in REUSE_ARMS:
            result.start_ms[arm], result.cpu_ms[arm] = await episode_starts(
                provisioner, server, args.run_id, args.samples, keep_servers=arm == "kept"
            )
        result.pss_mib, result.uss_mib, result.cgroup_mib = await density(
            provisioner, config, server, args.run_id, args.live
        )
        return result
    finally:
        await cleanup(provisioner, args.run_id)


# -- reporting --------------------------------------------------------------------------------


def table(results: Sequence[BackendResult], live: int) -> str:
    heads = [f"{op} p50/p95" for op in OPERATIONS] + ["MiB/env", "USS/env", "cgroup", "envs/GiB"]
    lines = [f"{'backend':13} " + " ".join(f"{h:>17}" if "/p95" in h else f"{h:>8}" for h in heads)]
    for r in results:
        if r.skipped is not None:
            lines.append(f"{r.backend:13} skipped: {r.skipped}")
            continue
        cells = [f"{percentile(r.ms[op], 50):8.1f}/{percentile(r.ms[op], 95):8.1f}" for op in OPERATIONS]
        cgroup = f"{r.cgroup_mib:8.1f}" if r.cgroup_mib is not None else f"{'-':>8}"
        cells += [f"{r.pss_mib:8.1f}", f"{r.uss_mib:8.1f}", cgroup, f"{envs_per_gib(r.pss_mib):8.1f}"]
        lines.append(f"{r.backend:13} " + " ".join(cells))
    lines.append(f"(milliseconds; memory: PSS/USS MiB per env over {live} live calculator envs)")
    lines.append("")
    lines.append(
        f"{'backend':13} {'episode start p50/p95: fresh':>30} {'kept':>17} {'speedup':>8} {'CPU ms/episode: fresh':>22} {'kept':>8}"
    )
    for r in results:
        if r.skipped is not None:
            continue
        fresh, kept = (r.start_ms[arm] for arm in REUSE_ARMS)
        cells = [
            f"{percentile(fresh, 50):21.1f}/{percentile(fresh, 95):8.1f}",
            f"{percentile(kept, 50):8.1f}/{percentile(kept, 95):8.1f}",
            f"{percentile(fresh, 50) / percentile(kept, 50):8.1f}",
            f"{r.cpu_ms['fresh']:22.1f}",
            f"{r.cpu_ms['kept']:8.1f}",
        ]
        lines.append(f"{r.backend:13} " + " ".join(cells))
    lines.append("(an episode start: EnvPool.acquire + McpGateway.open of the calculator; fresh: the server")
    lines.append(" started again per episode; kept: keep_alive, its session parked between episodes)")
    return "\n".join(lines)


def ratios(results: Sequence[BackendResult]) -> list[str]:
    """``<op>_x_local`` (p50 / local's p50) and ``mem_x_local`` per other backend."""
    base = next((r for r in results if r.backend == "local" and r.skipped is None), None)
    if base is None:
        return []
    lines = ["ratios to local (p50 / local's p50; PSS per env / local's):"]
    for r in results:
        if r is base or r.skipped is not None:
            continue
        parts = [
            f"{op}_x_local={percentile(r.ms[op], 50) / percentile(base.ms[op], 50):.1f}" for op in OPERATIONS
        ]
        lines.append(f"{r.backend:13} " + " ".join(parts) + f" mem_x_local={r.pss_mib / base.pss_mib:.1f}")
    return lines if len(lines) > 1 else []


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated (default: all)")
    parser.add_argument("--samples", type=int, default=20, help="timed rounds per operation")
    parser.add_argument("--live", type=int, default=8, help="environments running a server at once")
    parser.add_argument("--quick", action="store_true", help="3 samples, 2 live (the test suite's run)")
    env_nodes.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.nodes is not None and args.nodes < 2:
        parser.error("--nodes must be >= 2 (one node is the rest of this bench)")
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = sorted(set(args.backends) - set(BACKENDS))
    if unknown or not args.backends:
        parser.error(f"--backends: unknown {unknown}; choose from {', '.join(BACKENDS)}")
    if args.quick:
        args.samples, args.live = 3, 2
    if args.samples < 1 or args.live < 1:
        parser.error("--samples and --live must be >= 1")
    args.run_id = f"bench-envpool-{uuid.uuid4().hex[:8]}"
    return args


def main(argv: Sequence[str] | None = None) -> list[BackendResult]:
    args = parse_args(argv)
    if args.nodes is not None:
        print(anyio.run(env_nodes.run, args), flush=True)
        return []
    server = load_server_registry(CALCULATOR_REGISTRY).launch("calculator")
    if not os.path.exists(server.command):
        raise SystemExit(f"env_pool: {server.command} is missing: run `make servers` in the project root")
    print(
        f"run {args.run_id}: {args.samples} samples, {args.live} live envs, backends {args.backends}",
        flush=True,
    )
    results = [anyio.run(bench_backend, backend, server, args) for backend in args.backends]
    print(table(results, args.live))
    for line in ratios(results):
        print(line)
    for r in results:
        print(summary_line(r))
    return results


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # the environments are destroyed by then (shielded cleanups)
        sys.exit(130)
