"""What the rollout pipeline hands out: complete (or dropped) groups, and per-stage metrics.

A ``Group`` is every trajectory sampled for one task in one step, with the reason it cannot be
trained when it cannot (a partial group is never trained). ``StageMetrics`` counts what each stage
of ``actors.rollout.RolloutPipeline`` did: seconds queued and busy, items passed, live environments,
retries, and trajectories lost by cause.
"""

from __future__ import annotations

import msgspec

from specs.trajectory import Trajectory


class Group(msgspec.Struct, kw_only=True):
    """All trajectories sampled for one task in one step."""

    task_id: str
    group_id: str
    trajectories: list[Trajectory]
    dropped: str | None = None
    """Why the group cannot be trained (``infra_failed``, ``eval_failed``), or ``None``."""


class StageMetrics(msgspec.Struct, kw_only=True):
    """Seconds per stage summed over trajectories (``<stage>_wait_s`` queued for a worker of that
    stage, ``<stage>_s`` working in it), items passed, and losses by cause. ``acquire_s`` includes
    waiting inside the pool for its cap on live environments."""

    acquire_wait_s: float = 0.0
    acquire_s: float = 0.0
    run_wait_s: float = 0.0
    run_s: float = 0.0
    evaluate_wait_s: float = 0.0
    evaluate_s: float = 0.0
    release_s: float = 0.0
    acquired: int = 0
    episodes: int = 0
    evaluated: int = 0
    max_live_envs: int = 0
    lost: dict[str, int] = msgspec.field(default_factory=dict)
    """Trajectories lost, by cause (a retried one counts once per failed attempt)."""
    retried: int = 0
    """Attempts started again on a fresh environment after an infrastructure failure."""
    groups_dropped: int = 0
    tool_cleanups: int = 0
    """Cleanup tools called for the episodes' tool calls (a task's per-call ``cleanups``)."""
    cleanup_failures: int = 0
    """Of those, the calls that failed (logged; the episodes' scores stand)."""
    queued: dict[str, int] = msgspec.field(default_factory=dict)
    """Per stage, trajectories waiting for a worker now."""
    busy: dict[str, int] = msgspec.field(default_factory=dict)
    """Per stage, workers working now."""
    peak_queued: dict[str, int] = msgspec.field(default_factory=dict)
    """Per stage, the longest queue seen."""
    peak_busy: dict[str, int] = msgspec.field(default_factory=dict)
    """Per stage, the most workers busy at once."""

    def lose(self, cause: str) -> None:
        self.lost[cause] = self.lost.get(cause, 0) + 1

    def count(self, gauge: str, stage: str, delta: int) -> None:
        """Move gauge ``queued`` or ``busy`` of ``stage`` by ``delta``, keeping its peak."""
        now, peak = getattr(self, gauge), getattr(self, f"peak_{gauge}")
        now[stage] = now.get(stage, 0) + delta
        peak[stage] = max(peak.get(stage, 0), now[stage])

    def as_metrics(self) -> dict[str, float]:
        """Flat numbers for the step table and W&B: stage seconds, peaks, losses by cause."""
        return {
            **{f"stage_{k}": v for k, v in msgspec.structs.asdict(self).items() if k.endswith("_s")},
            **{f"stage_{s}_peak_queued": float(n) for s, n in self.peak_queued.items()},
            **{f"stage_{s}_peak_busy": float(n) for s, n in self.peak_busy.items()},
            "max_live_envs": float(self.max_live_envs),
            "groups_dropped": float(self.groups_dropped),
            "retried": float(self.retried),
            "cleanup_failures": float(self.cleanup_failures),
            **{f"lost_{cause}": float(n) for cause, n in self.lost.items()},
        }
