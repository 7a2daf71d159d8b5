"""The pipeline bench's results: one ``Result`` per mode and latency, its table and summary line.

``Result.efficiency`` is E = achieved tok/s over the mode's physical limit; ``speedup`` is the
geometric mean over the latencies of ``decoupled-5x``'s achieved tok/s over another mode's;
``summary_line`` is the bench's last line (``launch/bench/pipeline.py`` documents its fields) and
``table`` the per-latency report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from launch.bench.pipeline_modes import Mode, Settings
from policies.throughput import Limit


@dataclass
class Result:
    mode: Mode
    latency: float
    episodes: int
    achieved: float
    limit: Limit
    util: float
    max_live: int
    steady: bool
    window_s: float
    e_run: float = math.nan
    """E against the limit with the acquire time measured in the run."""
    cpu: dict[str, float] = field(default_factory=dict)
    """Over the window: ``turn`` (this process's CPU s per turn), ``episode`` (the process tree's
    CPU s per episode), ``free`` (cores the rest of the machine left idle)."""
    timing: dict[str, float] = field(default_factory=dict)
    """Seconds per episode completed in the window beside the model's (``model_*``): ``decode``,
    ``other`` (the rest of its span: tools, orchestrator), ``acquire``."""
    faults: dict[str, int] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)
    groups_dropped: int = 0
    partial_groups: int = 0
    useful_tokens: int = 0
    generated_tokens: int = 0
    leftovers: int = 0

    @property
    def efficiency(self) -> float:
        return self.achieved / self.limit.tokens_per_s


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def geometric_mean(values: Sequence[float]) -> float:
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"geometric_mean needs positive values, got {list(values)}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def speedup(results: Sequence[Result], over: str) -> float:
    """Achieved tok/s of ``decoupled-5x`` over mode ``over``'s at the same latency, geometric mean
    over the latencies where both achieved something (``nan`` if none)."""
    by = {(r.latency, r.mode.name): r.achieved for r in results}
    pairs = [(by[t, "decoupled-5x"], by[t, over]) for t in sorted({r.latency for r in results})]
    ratios = [mine / theirs for mine, theirs in pairs if mine > 0 and theirs > 0]
    return geometric_mean(ratios) if ratios else math.nan


def summary_line(results: Sequence[Result], faults: float) -> str:
    line = (
        f"pipeline: E_min={min(r.efficiency for r in results):.3f} "
        f"decoupled_over_coupled={speedup(results, 'coupled'):.2f} "
        f"decoupled_over_control={speedup(results, 'control'):.2f}"
    )
    if faults > 0:
        useful = sum(r.useful_tokens for r in results) / max(1, sum(r.generated_tokens for r in results))
        partial, left = sum(r.partial_groups for r in results), sum(r.leftovers for r in results)
        line += (
            f" faults={faults:g} useful_over_generated={useful:.3f} partial_groups={partial} leftovers={left}"
        )
    return line


def table(results: Sequence[Result], cal: dict[str, float], s: Settings) -> str:
    lines = [
        f"tool latency {results[0].latency:g} s: T={s.turns} turns x N={s.tokens_per_turn} tokens, "
        f"t(b)={s.step_t0_s * 1e3:g}+{s.step_t1_s * 1e3:g}*b ms, B={s.max_num_seqs}; calibrated: "
        + " ".join(f"{k}={v * 1e3:.1f}ms" for k, v in cal.items()),
        f"{'mode':13} {'a':>2} {'r':>2} {'L':>2} {'eps':>4} {'tok/s':>6} {'limit':>6} {'binding':>16} "
        f"{'E':>5} {'E_run':>5} {'util':>5} {'live':>4} {'window s':>9}",
    ]
    for r in results:
        m, t, cpu = r.mode, r.timing, r.cpu
        lines += [
            f"{m.name:13} {m.acquire:2d} {m.run:2d} {m.cap:2d} {r.episodes:4d} {r.achieved:6.1f} "
            f"{r.limit.tokens_per_s:6.1f} {r.limit.binding:>16} {r.efficiency:5.2f} {r.e_run:5.2f} "
            f"{r.util:5.2f} {r.max_live:4d} {r.window_s:8.1f}{'' if r.steady else '*'}",
            f"{'':14}bounds tok/s: " + " ".join(f"{k}={v:.1f}" for k, v in r.limit.bounds.items() if v < 1e4),
            f"{'':14}s/episode, run (model): decode {t['decode']:.2f} ({t['model_decode']:.2f}) "
            f"tools+other {t['other']:.2f} ({t['model_other']:.2f}) acquire {t['acquire']:.2f} "
            f"({t['model_acquire']:.2f}); cpu {cpu['turn'] * 1e3:.1f} ms/turn, "
            f"{cpu['episode']:.2f} s/episode, {cpu['free']:.2f} cores free",
        ]
        if s.faults > 0:
            lines.append(
                f"{'':14}faults {r.faults} lost {r.lost} dropped_groups={r.groups_dropped} "
                f"partial_groups={r.partial_groups} useful/generated={r.useful_tokens}/{r.generated_tokens} "
                f"leftovers={r.leftovers}"
            )
    steady = "" if all(r.steady for r in results) else "   (*: measured from the start, not steady)"
    over = f"over coupled {speedup(results, 'coupled'):.2f}, over control {speedup(results, 'control'):.2f}"
    return "\n".join([*lines, f"decoupled-5x {over}{steady}"])
