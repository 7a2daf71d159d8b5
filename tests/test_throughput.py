"""Pins the physical-limit model of a rollout workload (``policies/throughput.py``) on worked examples
computed by hand in the comments."""

from __future__ import annotations

import math

import msgspec
import pytest

from policies.throughput import (
    BOUNDS,
    Workload,
    closed_loop_rate,
    decode_share,
    engine_saturation,
    physical_limit,
    seen_batch,
    step_time,
)


def workload(**overrides: object) -> Workload:
    """T=2 turns x N=10 tokens (D=20), t(b)=0.1 s flat, B=2, one tool call of 0.9 + 0.1 s."""
    fields: dict[str, object] = {
        "turns": 2,
        "tokens_per_turn": 10,
        "tool_latency_s": 0.9,
        "tool_overhead_s": 0.1,
        "step_t0_s": 0.1,
        "step_t1_s": 0.0,
        "max_num_seqs": 2,
        "live_cap": 2,
        "acquire_workers": 1,
        "run_workers": 1,
        "eval_workers": 1,
        "acquire_s": 0.5,
        "evaluate_s": 0.25,
        "release_s": 0.25,
        "orchestrator_cpu_s_per_turn": 0.01,
        "host_cpu_s_per_episode": 0.5,
        "host_cores": 2.0,
    }
    fields.update(overrides)
    return Workload(**fields)  # type: ignore[arg-type]


def test_step_time_and_engine_saturation() -> None:
    assert step_time(3, 0.02, 0.005) == pytest.approx(0.035)  # 0.02 + 3 * 0.005
    assert step_time(0, 0.02, 0.005) == 0.02
    # B = 3, t(3) = 0.035 s: 3 tokens every 0.035 s = 85.714 tok/s
    w = workload(step_t0_s=0.02, step_t1_s=0.005, max_num_seqs=3)
    assert engine_saturation(w) == pytest.approx(3 / 0.035)
    with pytest.raises(ValueError, match="batch must be >= 0"):
        step_time(-1, 0.1, 0.0)


def test_one_episode_alone_decodes_at_batch_one() -> None:
    # C = 1: b' = 1, t(1) = 0.02 + 0.005 = 0.025; D*t = 80 * 0.025 = 2.0 s; X = 1.0 s
    # p = 2 / (2 + 1) = 2/3; rate = 1 * 80 / 3 = 26.667 tok/s
    assert decode_share(1, 80, 1.0, 0.02, 0.005) == pytest.approx(2 / 3)
    assert seen_batch(1, 2 / 3) == 1
    assert closed_loop_rate(1, 80, 1.0, 0.02, 0.005) == pytest.approx(80 / 3)


def test_two_episodes_share_the_engine_at_the_fixed_point() -> None:
    # C = 2, D = 10, X = 1, t0 = t1 = 0.1: alpha = 0.2, beta = 0.1, D*beta = 1, D*alpha = 2
    # quadratic: p^2 + (2 + 1 - 1) p - 2 = 0  ->  p = sqrt(3) - 1 = 0.7320508
    # b' = 1 + p = 1.7320508, t(b') = 0.27320508, cycle = 10 * t + 1 = 2 + sqrt(3)
    # rate = 2 * 10 / (2 + sqrt(3)) = 20 (2 - sqrt(3)) = 5.3589838 tok/s
    p = decode_share(2, 10, 1.0, 0.1, 0.1)
    assert p == pytest.approx(math.sqrt(3) - 1)
    t = step_time(seen_batch(2, p), 0.1, 0.1)
    assert p == pytest.approx(10 * t / (10 * t + 1))  # it is the fixed point
    assert closed_loop_rate(2, 10, 1.0, 0.1, 0.1) == pytest.approx(20 * (2 - math.sqrt(3)))


def test_the_root_is_stable_when_decoding_is_a_tiny_share() -> None:
    # X huge against D*t: p ~ D*alpha / X; compare with plain fixed-point iteration
    p = decode_share(8, 10, 1e6, 1e-4, 1e-4)
    q = 0.5
    for _ in range(50):
        t = step_time(1 + 7 * q, 1e-4, 1e-4)
        q = 10 * t / (10 * t + 1e6)
    assert p == pytest.approx(q, rel=1e-9) and p > 0


def test_no_other_work_means_always_decoding() -> None:
    # X = 0: p = 1, every sequence decodes all the time: rate = C / t(C) = 3 / (0.1 + 0.3)
    assert decode_share(3, 10, 0.0, 0.1, 0.1) == pytest.approx(1.0)
    assert closed_loop_rate(3, 10, 0.0, 0.1, 0.1) == pytest.approx(3 / 0.4)


def test_every_bound_on_a_worked_example() -> None:
    w = workload()
    limit = physical_limit(w)
    # D = 20; X_run = 1 call * (0.9 + 0.1) = 1.0; t = 0.1 flat
    assert (w.tokens_per_episode, w.other_run_s) == (20, pytest.approx(1.0))
    assert limit.bounds == pytest.approx(
        {
            "engine": 20.0,  # 2 / 0.1
            "acquire": 40.0,  # 1 / 0.5 ep/s * 20
            "run": 20 / 3,  # 1 * 20 / (20 * 0.1 + 1.0)
            "live_envs": 10.0,  # 2 * 20 / (2.0 + 1.0 + 0.5 + 0.25 + 0.25)
            "evaluate": 80.0,  # 1 / 0.25 * 20
            "orchestrator_cpu": 1000.0,  # 1 / (2 turns * 0.01 s) * 20
            "host_cpu": 80.0,  # 2 cores / 0.5 s * 20
        }
    )
    assert list(limit.bounds) == list(BOUNDS)
    assert limit.binding == "run" and limit.tokens_per_s == pytest.approx(20 / 3)
    assert limit.episodes_per_s == pytest.approx(1 / 3)
    assert (limit.run_s, limit.env_s) == (pytest.approx(3.0), pytest.approx(4.0))  # 2 + 1; + 0.5 + 0.5
    assert limit.engine_share == pytest.approx(1 / 3)


def test_more_run_workers_move_the_limit_to_the_engine_then_to_the_live_envs() -> None:
    # r = 4: run = 4 * 20 / 3 = 26.7 > engine 20; L = 8: live = 8 * 20 / 4 = 40 -> the engine binds
    limit = physical_limit(workload(run_workers=4, live_cap=8))
    assert (limit.binding, limit.tokens_per_s, limit.engine_share) == ("engine", pytest.approx(20.0), 1.0)
    # L = 2 again: live = 10 < engine 20
    assert physical_limit(workload(run_workers=4)).binding == "live_envs"


def test_tool_turns_are_one_fewer_than_model_turns_and_turn_overheads_count_every_turn() -> None:
    # T = 3: two calls of (0.9 + 0.1) plus 3 turns * 0.05 = 2.15 s outside decoding
    assert workload(turns=3, turn_overhead_s=0.05).other_run_s == pytest.approx(2.15)
    assert workload(turns=1).other_run_s == 0.0  # a single turn answers without a tool


def test_a_free_stage_never_binds() -> None:
    limit = physical_limit(
        workload(acquire_s=0.0, evaluate_s=0.0, orchestrator_cpu_s_per_turn=0.0, host_cpu_s_per_episode=0.0)
    )
    for name in ("acquire", "evaluate", "orchestrator_cpu", "host_cpu"):
        assert math.isinf(limit.bounds[name])
    assert limit.binding == "run"


def test_the_run_bound_never_falls_when_workers_are_added() -> None:
    rates = [closed_loop_rate(c, 40, 1.0, 0.02, 0.005) for c in range(1, 40)]
    assert all(later >= earlier for earlier, later in zip(rates, rates[1:], strict=False))
    assert rates[-1] < 1 / 0.005  # C / t(C) tends to 1 / t1 from below


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("turns", 0, "turns must be an integer >= 1"),
        ("tokens_per_turn", True, "tokens_per_turn must be an integer"),
        ("run_workers", 1.5, "run_workers must be an integer"),
        ("tool_latency_s", -0.1, "tool_latency_s must be a finite number >= 0"),
        ("acquire_s", math.nan, "acquire_s must be a finite number"),
        ("host_cores", 0.0, "host_cores must be a finite number > 0"),
    ],
)
def test_a_bad_workload_is_refused_naming_the_field(field: str, value: object, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        workload(**{field: value})


def test_an_engine_step_must_take_time() -> None:
    with pytest.raises(ValueError, match="step_t0_s \\+ step_t1_s must be > 0"):
        workload(step_t0_s=0.0, step_t1_s=0.0)
    with pytest.raises(ValueError, match="concurrency >= 1"):
        decode_share(0, 10, 1.0, 0.1, 0.0)


def test_a_workload_is_frozen_plain_data() -> None:
    w = workload()
    assert msgspec.json.decode(msgspec.json.encode(w), type=Workload) == w
    with pytest.raises(AttributeError):
        w.turns = 3  # type: ignore[misc]
