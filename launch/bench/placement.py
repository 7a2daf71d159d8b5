"""Colocated vs async placement on the real model: time per step, and the overlap ceiling.

    python -m launch.bench.placement [--steps 5] [--skip 1] [key.path=value ...]

Runs ``launch/train.py`` twice with the same config and seed, ``placement=colocated`` then
``placement=async`` (``max_staleness`` 1), and reads each run's ``metrics.jsonl``. Steps before
``--skip`` are left out (engine warm-up). From the *colocated* run's own stage times:

    T_gen   = mean rollout seconds of a step (sampling, tools, evaluation)
    T_train = mean update + weight-sync seconds of a step
    ceiling = (T_gen + T_train) / max(T_gen, T_train)

the best speed-up overlapping the two stages can give (perfect overlap on separate devices). The
async run's speed-up is ``async_over_colocated = step_s(colocated) / step_s(async)`` (mean wall
seconds between consecutive trained steps), and ``async_vs_ceiling = async_over_colocated /
ceiling``. The last line reads ``placement: async_over_colocated=X async_vs_ceiling=Y``.

On a CPU-only machine the two "devices" are the same cores: generation and training slow each
other down when they overlap, so the ceiling (which assumes separate devices) is out of reach by
construction; the figure measures how much of it the orchestration recovers anyway. Training
happens every step even before the policy solves a task: the config below keeps zero-advantage
samples with a small KL to the rollout policy (``algorithm.kl_coef``), so ``T_train`` is a real
update. Override anything (e.g. ``warmstart.enabled=true``) after the flags.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

REPO = Path(__file__).resolve().parents[2]
DEFAULTS = (
    "warmstart.enabled=false",
    "train.eval_tasks_limit=1",
    "rollout.tasks_per_step=4",
    "rollout.group_size=4",
    "rollout.max_turns=2",
    "algorithm.kl_coef=0.001",
    "algorithm.kl_reference=rollout",
    "wandb.mode=disabled",
)


class StageTimes(msgspec.Struct, frozen=True, kw_only=True):
    """Mean seconds per step of one run (steps after the skipped warm-up)."""

    step_s: float
    rollout_s: float
    train_s: float
    steps: int


class PlacementResult(msgspec.Struct, frozen=True, kw_only=True):
    colocated: StageTimes
    asynchronous: StageTimes
    ceiling: float
    async_over_colocated: float
    async_vs_ceiling: float


def stage_times(records: Sequence[dict[str, Any]], skip: int) -> StageTimes:
    """Mean step, rollout and update+sync seconds over the train records with step > ``skip``."""
    kept = [r for r in records if r.get("phase") == "train" and r["step"] > skip]
    if not kept:
        raise ValueError(f"no train step after the first {skip}: run more steps (--steps)")
    return StageTimes(
        step_s=statistics.fmean(r["step_s"] for r in kept),
        rollout_s=statistics.fmean(r["rollout_s"] for r in kept),
        train_s=statistics.fmean(r["update_s"] + r["sync_s"] for r in kept),
        steps=len(kept),
    )


def overlap_ceiling(t_gen: float, t_train: float) -> float:
    """``(T_gen + T_train) / max(T_gen, T_train)``: 2 when balanced, 1 when one stage is all."""
    if t_gen < 0 or t_train < 0 or max(t_gen, t_train) == 0:
        raise ValueError(f"stage times must be >= 0 and not both 0, got T_gen={t_gen}, T_train={t_train}")
    return (t_gen + t_train) / max(t_gen, t_train)


def compare(colocated: StageTimes, asynchronous: StageTimes) -> PlacementResult:
    ceiling = overlap_ceiling(colocated.rollout_s, colocated.train_s)
    speedup = colocated.step_s / asynchronous.step_s
    return PlacementResult(
        colocated=colocated,
        asynchronous=asynchronous,
        ceiling=ceiling,
        async_over_colocated=speedup,
        async_vs_ceiling=speedup / ceiling,
    )


def summary_line(result: PlacementResult) -> str:
    return (
        f"placement: async_over_colocated={result.async_over_colocated:.2f} "
        f"async_vs_ceiling={result.async_vs_ceiling:.2f}"
    )


def run_training(placement: str, steps: int, output: str, overrides: Sequence[str]) -> list[dict[str, float]]:
    name = f"bench-{placement}"
    cmd = [
        sys.executable,
        "launch/train.py",
        f"output_dir={output}",
        f"run_name={name}",
        f"placement={placement}",
        f"train.steps={steps}",
        *DEFAULTS,
        *overrides,
    ]
    started = time.perf_counter()
    print(f"$ {' '.join(cmd[1:])}", flush=True)
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(
            f"{placement} run failed ({done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}"
        )
    print(f"  {placement}: {time.perf_counter() - started:.0f} s", flush=True)
    with open(os.path.join(output, name, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=5, help="RL steps per run")
    parser.add_argument("--skip", type=int, default=1, help="first steps left out (warm-up)")
    parser.add_argument("--output", help="where the runs go (default: a temporary directory)")
    parser.add_argument("overrides", nargs="*", help="config overrides for both runs, key.path=value")
    args = parser.parse_args(argv)
    output = args.output or tempfile.mkdtemp(prefix="mcprl-bench-placement-")
    times = {
        placement: stage_times(run_training(placement, args.steps, output, args.overrides), args.skip)
        for placement in ("colocated", "async")
    }
    result = compare(times["colocated"], times["async"])
    print(f"\n{'placement':<10} {'steps':>5} {'step s':>7} {'rollout s':>9} {'train s':>7}")
    for name, t in (("colocated", result.colocated), ("async", result.asynchronous)):
        print(f"{name:<10} {t.steps:>5} {t.step_s:>7.1f} {t.rollout_s:>9.1f} {t.train_s:>7.1f}")
    print(f"overlap ceiling (colocated stage times): {result.ceiling:.2f}")
    print(summary_line(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
