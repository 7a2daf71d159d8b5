"""Benchmark: the rollout pipeline against its physical limit, coupled vs decoupled, in one run.

    python -m launch.bench.pipeline [--quick] [--latencies 0.1,1,5] [--workers 1] [--faults P]

Everything below the policy is real and in-process: ``RolloutPipeline`` driving ``EnvPool`` (local
backend), ``McpGateway`` with one latency MCP server per environment (``tests/servers/latency_server.py``,
started per episode as in training) and ``Evaluator``; token-exact recording with the demo
tokenizer. Only the engine is simulated (``launch/bench/sim_generator.py``): continuous batching
with step time t(b) = t0 + t1*b for b decoding sequences, at most B at once, on a clock the
orchestrator's CPU cannot slow down. Its scripted policy makes T-1 tool calls ``sleep(tau)``, then
answers; every turn is N tokens. Tasks are synthetic, in groups of two.

Per tool latency tau, the same workload runs in four modes (a, r, L: acquire and run workers,
live-environment cap; eval workers = a):

- ``coupled``: a = r = n, L = a + r;
- ``decoupled-2x``, ``decoupled-5x``: a = n, r = 2n and 5n, L = a + r;
- ``control``: the coupled setting holding as many environments as ``decoupled-5x`` held at
  most (M): a = r = L = M, so an environment being acquired is one the run stage cannot use.

First a calibration runs single episodes alone (on a 1 ms engine) and keeps the least of each
cost: acquire (pool, MCP sessions, the server's start), evaluate and release seconds, the MCP
overhead of a tool call over tau, the orchestrator's latency per turn. Each mode's physical limit
(``policies.throughput.physical_limit``) takes those, the mode's worker counts, and three CPU
figures measured in the mode's own window: this process's CPU s per turn (the orchestrator's
bound), the process tree's CPU s per episode (servers included) and the cores the rest of the
machine left free (the host bound: the machine is shared).

Steady window: an episode completes when its last turn comes back. With C = min(r, L) episodes
cycling, completions C apart are one cycle apart, so the window runs from the C-th completion (the
first generation, the ramp-up, is over) over ``cycles`` whole cycles, while the last generation
is still in flight; the run is stopped there (``--faults`` runs to the end: every group counts).
Achieved tok/s = tokens the engine emitted in the window / its length (whole cycles: exact for a
periodic pipeline and for a saturated engine alike), E = achieved / limit, ``util`` = achieved /
(B/t(B)). A run with too few completions for that (faults, ``--quick``) is measured whole, from its
start to its end.
``E_run`` is E against the limit recomputed with the acquire time of the run itself (servers that
start together share the CPU): E / E_run is what contention in acquisition cost; the per-episode
decode and tool times beside the model's show the rest.

``--faults P``: each environment, when opened, draws a fault with probability P, injected at its
first tool call: its server is killed, the environment destroyed, or the generator killed (every
request in flight lost; it restarts 0.5 s later). The pipeline retries a lost trajectory once on a
fresh environment. Reported: useful tokens (those of trained groups) over generated tokens, attempts
lost by cause, groups dropped, partial groups trained (not dropped, fewer than group-size ok
members: must be 0) and leftovers (the run's environments on disk and live processes after
shutdown: must be 0).

Prints a table per tool latency and ends with one line ``pipeline: E_min=X
decoupled_over_coupled=Y decoupled_over_control=Z`` (X: the lowest E over every mode and latency;
Y, Z: achieved tok/s of ``decoupled-5x`` over ``coupled`` and over ``control`` at the same latency,
geometric mean over the latencies), with ``faults=P useful_over_generated=.. partial_groups=..
leftovers=..`` appended under ``--faults``. ``--quick`` (one latency, one generation of episodes,
a fast engine, measured from the start) is what the test suite runs.

The settings, modes and steady window are ``launch/bench/pipeline_modes.py``'s; the results, table
and summary line ``launch/bench/pipeline_report.py``'s; this module runs the real pipeline around them.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import cast

import anyio
import anyio.abc
import msgspec

from actors.env_pool import EnvPool
from actors.evaluator import Evaluator
from actors.groups import Group, StageMetrics
from actors.mcp_gateway import McpGateway
from actors.provisioners.local import LocalProvisioner
from actors.rollout import RolloutPipeline, env_config_resolver
from launch.bench.faults import CpuSampler, FaultyGateway, leftovers
from launch.bench.pipeline_modes import (
    QUICK,
    Mode,
    Settings,
    episodes_needed,
    modes,
    steady_window,
    tasks,
)
from launch.bench.pipeline_report import Result, mean, summary_line, table
from launch.bench.sim_generator import Episode, EpisodeEngine, LatencyToolScript, SimulatedGenerator
from policies.react import EpisodeLimits
from policies.throughput import Workload, physical_limit
from policies.tokens import ChatRecorder, ChatTokenizer
from policies.types import SamplingConfig
from specs.servers import parse_server_registry
from tests.servers.latency_server import REGISTRY, SERVER_NAME, TOOL

MODEL = Path(__file__).resolve().parents[2] / ".cache" / "models" / "SmolLM2-135M-Instruct"
COSTS = ("acquire_s", "evaluate_s", "release_s", "tool_overhead_s", "turn_overhead_s")
"""The calibrated costs, named as the ``Workload`` fields they fill."""
CLEANUP_TIMEOUT_S = 120.0


@dataclass
class Outcome:
    """What one ``collect`` left behind."""

    metrics: StageMetrics
    groups: list[Group]
    episodes: list[Episode]
    sim: SimulatedGenerator
    cpu: CpuSampler
    started: float
    ended: float
    gateway: FaultyGateway
    leftovers: int


# -- runs -----------------------------------------------------------------------------------------


@dataclass
class Bench:
    settings: Settings
    tokenizer: ChatTokenizer
    root: Path
    run_prefix: str
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    """Draws the faults of every run in turn (seeded: a rerun injects the same sequence)."""

    async def run(
        self,
        mode: Mode,
        latency: float,
        episodes: int,
        *,
        group_size: int,
        engine: tuple[float, float],
        stop_after: int | None = None,
        faults: float = 0.0,
    ) -> Outcome:
        """One ``collect`` of ``episodes`` in ``mode``, cancelled after ``stop_after`` completions."""
        s = self.settings
        tool = f"{SERVER_NAME}__{TOOL}"
        script = LatencyToolScript(
            self.tokenizer, tool_name=tool, seconds=latency, turns=s.turns, tokens_per_turn=s.tokens_per_turn
        )
        run_id = f"{self.run_prefix}-{mode.name}-{latency:g}-{uuid.uuid4().hex[:4]}"
        provisioner = LocalProvisioner(self.root)
        pool = EnvPool(provisioner, run_id, max_live=mode.cap)
        done: list[Episode] = []
        groups: list[Group] = []
        stop = anyio.CancelScope()

        def completed(episode: Episode) -> None:
            done.append(episode)
            if stop_after is not None and len(done) >= stop_after:
                stop.cancel()

        limits = EpisodeLimits(
            max_turns=s.turns, max_new_tokens=s.tokens_per_turn, tool_timeout_s=latency + 30
        )
        try:
            async with (
                SimulatedGenerator.running(
                    script, step_t0_s=engine[0], step_t1_s=engine[1], max_num_seqs=s.max_num_seqs
                ) as sim,
                McpGateway.running(provisioner_for=lambda _: provisioner) as real_gateway,
                anyio.create_task_group() as tg,
            ):
                gateway = FaultyGateway(
                    real_gateway, provisioner, sim, tg, p=faults, restart_s=s.restart_s, rng=self.rng
                )
                pipeline = RolloutPipeline(
                    pool=pool,
                    gateway=gateway,
                    evaluator=Evaluator(),
                    env_config_for=env_config_resolver(parse_server_registry(REGISTRY, "<pipeline bench>")),
                    engine_for=lambda _task: EpisodeEngine(sim, script, completed, gateway.lost),
                    recorder_factory=lambda: ChatRecorder(self.tokenizer),
                    acquire_workers=mode.acquire,
                    run_workers=mode.run,
                    eval_workers=mode.acquire,
                    retries=1,
                )
                cpu = CpuSampler()
                tg.start_soon(cpu.run)
                started = time.perf_counter()
                with stop:
                    sampling = SamplingConfig(max_tokens=s.tokens_per_turn)
                    batch = tasks(episodes // group_size)
                    await pipeline.collect(batch, group_size, sampling, limits, on_group=groups.append)
                ended = time.perf_counter()
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT_S):
                await pool.shutdown()
        left = await anyio.to_thread.run_sync(leftovers, self.root, run_id)
        return Outcome(pipeline.metrics, groups, done, sim, cpu, started, ended, gateway, left)

    async def calibrate(self, latency: float) -> dict[str, float]:
        """Single episodes alone on a 1 ms engine: the ``COSTS`` of one episode, and ``open_s``
        (``McpGateway.open``). Each is the least seen over the measured episodes (the first is a
        warm-up): other load on the machine only ever adds to a cost."""
        s, step = self.settings, 0.001
        seen: dict[str, list[float]] = {}
        for i in range(s.calibration_episodes):
            out = await self.run(Mode("calibration", 1, 1, 1), latency, 1, group_size=1, engine=(step, 0.0))
            (trajectory,) = out.groups[0].trajectories
            if trajectory.status != "ok" or len(trajectory.tool_calls) != s.turns - 1:
                raise RuntimeError(f"calibration episode failed: {trajectory.status} {trajectory.error}")
            if i == 0:
                continue  # warm-up: imports, the chat template's first compile
            m, tool = out.metrics, sum(c.latency_s for c in trajectory.tool_calls)
            measured = {
                "acquire_s": m.acquire_s,
                "evaluate_s": m.evaluate_s,
                "release_s": m.release_s,
                "tool_overhead_s": tool / (s.turns - 1) - latency if s.turns > 1 else 0.0,
                "turn_overhead_s": (m.run_s - s.turns * s.tokens_per_turn * step - tool) / s.turns,
                "open_s": out.gateway.open_s[0],
            }
            for key, value in measured.items():
                seen.setdefault(key, []).append(max(0.0, value))
        if not seen:
            raise ValueError(f"calibration_episodes must be >= 2 (one warm-up), got {s.calibration_episodes}")
        return {key: min(values) for key, values in seen.items()}

    def workload(self, mode: Mode, latency: float, cal: dict[str, float], cpu: dict[str, float]) -> Workload:
        s = self.settings
        return Workload(
            turns=s.turns,
            tokens_per_turn=s.tokens_per_turn,
            tool_latency_s=latency,
            step_t0_s=s.step_t0_s,
            step_t1_s=s.step_t1_s,
            max_num_seqs=s.max_num_seqs,
            live_cap=mode.cap,
            acquire_workers=mode.acquire,
            run_workers=mode.run,
            eval_workers=mode.acquire,
            orchestrator_cpu_s_per_turn=cpu["turn"],
            host_cpu_s_per_episode=cpu["episode"],
            host_cores=cpu["free"],
            **{key: cal[key] for key in COSTS},
        )

    async def measure(self, mode: Mode, latency: float, cal: dict[str, float]) -> Result:
        s, c = self.settings, mode.concurrency
        out = await self.run(
            mode,
            latency,
            episodes_needed(mode, s.cycles, s.group_size),
            group_size=s.group_size,
            engine=(s.step_t0_s, s.step_t1_s),
            stop_after=c + s.cycles * c if s.cycles and s.faults == 0 else None,
            faults=s.faults,
        )
        completions = [e.completed_at for e in out.episodes]
        start, end, steady = steady_window(completions, c, s.cycles, out.started, out.ended)
        tokens = out.sim.tokens_between(start, end)
        cpu = out.cpu.window(start, end, tokens / s.tokens_per_turn, s.turns)
        workload = self.workload(mode, latency, cal, cpu)
        limit = physical_limit(workload)
        acquire_run = cal["acquire_s"] + max(0.0, mean(out.gateway.open_s) - cal["open_s"])
        limit_run = physical_limit(msgspec.structs.replace(workload, acquire_s=acquire_run))
        timed = [e for e in out.episodes if start < e.completed_at <= end] or out.episodes
        trained = [g for g in out.groups if g.dropped is None]
        return Result(
            mode=mode,
            latency=latency,
            episodes=len(completions),
            achieved=tokens / (end - start),
            limit=limit,
            util=out.sim.utilisation(start, end),
            max_live=out.metrics.max_live_envs,
            steady=steady,
            window_s=end - start,
            e_run=tokens / (end - start) / limit_run.tokens_per_s,
            cpu=cpu,
            timing={
                "decode": mean([e.decode_s for e in timed]),
                "model_decode": limit.run_s - workload.other_run_s,
                "other": mean([e.span_s - e.decode_s for e in timed]),
                "model_other": workload.other_run_s - workload.turn_overhead_s,  # from turn 1's call
                "acquire": acquire_run,
                "model_acquire": cal["acquire_s"],
            },
            faults=out.gateway.injected,
            lost=out.gateway.lost,
            groups_dropped=out.metrics.groups_dropped,
            partial_groups=sum(
                1 for g in trained if sum(t.status == "ok" for t in g.trajectories) < s.group_size
            ),
            useful_tokens=sum(t.num_generated_tokens for g in trained for t in g.trajectories),
            generated_tokens=out.sim.generated_tokens,
            leftovers=out.leftovers,
        )


async def sweep(settings: Settings, tokenizer: ChatTokenizer, root: Path, run_prefix: str) -> list[Result]:
    bench = Bench(settings, tokenizer, root, run_prefix)
    cal = await bench.calibrate(min(settings.latencies))
    results: list[Result] = []
    for latency in settings.latencies:
        point = [await bench.measure(mode, latency, cal) for mode in modes(settings.workers)]
        control = modes(settings.workers, control_live=point[-1].max_live)[-1]
        point.append(await bench.measure(control, latency, cal))
        print(table(point, cal, settings), flush=True)
        results.extend(point)
    return results


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latencies", default=None, help="tool latencies, comma-separated seconds")
    parser.add_argument("--workers", type=int, default=None, help="n: acquire workers (default 1)")
    parser.add_argument("--faults", type=float, default=0.0, help="probability of a fault per environment")
    parser.add_argument("--quick", action="store_true", help="one latency, few episodes (the test suite's)")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else Settings()
    if args.latencies:
        try:
            settings = replace(settings, latencies=tuple(float(x) for x in args.latencies.split(",")))
        except ValueError:
            parser.error(f"--latencies: expected comma-separated seconds, got {args.latencies!r}")
        if any(t < 0 or not math.isfinite(t) for t in settings.latencies):
            parser.error(f"--latencies must be finite and >= 0, got {args.latencies!r}")
    if args.workers is not None:
        if args.workers < 1:
            parser.error(f"--workers must be >= 1, got {args.workers}")
        settings = replace(settings, workers=args.workers)
    if not 0 <= args.faults < 1:
        parser.error(f"--faults must be a probability in [0, 1), got {args.faults}")
    args.settings = replace(settings, faults=args.faults)
    args.run_prefix = f"bench-pipeline-{uuid.uuid4().hex[:8]}"
    return args


def main(argv: Sequence[str] | None = None) -> list[Result]:
    args = parse_args(argv)
    from transformers import AutoTokenizer

    # HF types decode's result as str | list[str]; for one list of ids (all the recorder passes) it is a str.
    tokenizer = cast(ChatTokenizer, AutoTokenizer.from_pretrained(MODEL))
    s = args.settings
    print(
        f"run {args.run_prefix}: latencies {list(s.latencies)} s, n={s.workers}, group {s.group_size}, "
        f"faults p={s.faults:g}, {os.cpu_count()} cores (load {os.getloadavg()[0]:.2f})",
        flush=True,
    )
    root = Path(tempfile.mkdtemp(prefix="mcprl-bench-pipeline-"))
    try:
        results = anyio.run(sweep, s, tokenizer, root, args.run_prefix)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(summary_line(results, s.faults))
    return results


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # the environments are destroyed by then (shielded cleanups)
        sys.exit(130)
