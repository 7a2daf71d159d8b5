"""The placement benchmark's arithmetic (the runs themselves are a benchmark, not a test)."""

from __future__ import annotations

import pytest

from launch.bench.placement import StageTimes, compare, overlap_ceiling, stage_times, summary_line


def test_the_overlap_ceiling_is_two_when_balanced_and_one_when_a_stage_is_everything() -> None:
    assert overlap_ceiling(10.0, 10.0) == 2.0
    assert overlap_ceiling(30.0, 10.0) == pytest.approx(4 / 3)  # (30 + 10) / 30
    assert overlap_ceiling(0.0, 5.0) == 1.0
    with pytest.raises(ValueError, match="not both 0"):
        overlap_ceiling(0.0, 0.0)


def test_stage_times_skip_the_warm_up_and_read_update_plus_sync() -> None:
    records = [
        {"phase": "eval/base", "step": 0},
        {"phase": "train", "step": 1, "step_s": 99.0, "rollout_s": 50.0, "update_s": 40.0, "sync_s": 9.0},
        {"phase": "train", "step": 2, "step_s": 44.0, "rollout_s": 22.0, "update_s": 20.0, "sync_s": 2.0},
        {"phase": "train", "step": 3, "step_s": 40.0, "rollout_s": 20.0, "update_s": 18.0, "sync_s": 2.0},
    ]
    t = stage_times(records, skip=1)
    assert (t.step_s, t.rollout_s, t.train_s, t.steps) == (42.0, 21.0, 21.0, 2)
    with pytest.raises(ValueError, match="run more steps"):
        stage_times(records, skip=3)


def test_async_is_compared_with_the_ceiling_of_the_colocated_stage_times() -> None:
    colocated = StageTimes(step_s=42.0, rollout_s=21.0, train_s=21.0, steps=2)
    asynchronous = StageTimes(step_s=28.0, rollout_s=22.0, train_s=24.0, steps=2)
    result = compare(colocated, asynchronous)
    # ceiling = (21 + 21) / 21 = 2; speed-up = 42 / 28 = 1.5; 1.5 / 2 = 0.75
    assert (result.ceiling, result.async_over_colocated, result.async_vs_ceiling) == (2.0, 1.5, 0.75)
    assert summary_line(result) == "placement: async_over_colocated=1.50 async_vs_ceiling=0.75"
