"""Pins seed 002's tool-adoption signals: Eq. (3) return, Eq. (4) per-step advantage and bonus, gradient band."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from policies.adoption_advantages import group_step_advantages, step_advantages_with_bonus
from policies.advantages import group_advantages
from rewards.adoption import PassRateCurator, shaped_return, tool_bonus
from specs.trajectory import AdoptionScore, ToolCallRecord


def rec(
    turn: int, name: str = "calc__set_cell", args: dict[str, Any] | None = None, **kw: Any
) -> ToolCallRecord:
    fields: dict[str, Any] = {"ok": True, "error_kind": None, "read_only": False} | kw
    return ToolCallRecord(
        turn=turn,
        name=name,
        arguments={"cell": "A1"} if args is None else args,
        latency_s=0.0,
        output_bytes=1,
        **fields,
    )


# --- Eq. (3) -------------------------------------------------------------------------------------


def test_shaped_return_matches_eq3_with_the_paper_defaults() -> None:
    assert shaped_return(True, 10, 50) == pytest.approx(0.99)  # 1 - 0.05 * 10/50
    assert shaped_return(False, 20, 50) == pytest.approx(-1.02)  # -1 - 0.05 * 20/50
    assert shaped_return(False, 50, 50) == pytest.approx(-1.25)  # -1 - 0.05 * 1 - 0.2 (T >= T_max)
    assert shaped_return(True, 49, 50) == pytest.approx(0.951)  # 1 - 0.049, cap not hit
    assert shaped_return(True, 0, 50) == 1.0


def test_shaped_return_takes_custom_coefficients_and_zero_means_pure_outcome() -> None:
    assert shaped_return(True, 5, 10, lambda_len=0.5, lambda_cap=1.0) == pytest.approx(0.75)  # 1 - 0.5*0.5
    assert shaped_return(True, 10, 10, lambda_len=0.5, lambda_cap=1.0) == pytest.approx(-0.5)  # 1 - 0.5 - 1
    assert shaped_return(False, 50, 50, lambda_len=0.0, lambda_cap=0.0) == -1.0


def test_shaped_return_rejects_negative_steps_and_a_nonpositive_horizon() -> None:
    with pytest.raises(ValueError, match="steps"):
        shaped_return(True, -1, 50)
    with pytest.raises(ValueError, match="max_steps"):
        shaped_return(True, 1, 0)


# --- Eq. (4) without the bonus ---------------------------------------------------------------------


def test_group_step_advantages_zscore_with_sample_std_then_divide_by_T() -> None:
    # R = [1, -1, -1, -1]: mean -0.5, deviations [1.5, -0.5, -0.5, -0.5], sample var (2.25 + 3*0.25)/3 = 1.
    # z = [1.5, -0.5, -0.5, -0.5]; / T = [3, 5, 2, 10] -> [0.5, -0.1, -0.25, -0.05].
    adv = group_step_advantages([1.0, -1.0, -1.0, -1.0], [3, 5, 2, 10], eps=0.0)
    assert adv == pytest.approx([0.5, -0.1, -0.25, -0.05])


def test_group_step_advantages_on_shaped_returns() -> None:
    # R = [0.99, -1.02]: a two-member group always z-scores to +-1/sqrt(2); / T = [10, 20].
    adv = group_step_advantages([0.99, -1.02], [10, 20], eps=0.0)
    assert adv == pytest.approx([1 / math.sqrt(2) / 10, -1 / math.sqrt(2) / 20])


def test_group_step_advantages_share_the_grpo_std_convention() -> None:
    returns = [0.3, -1.2, 0.99, -1.25, 0.5]
    z = group_advantages(returns, ["g"] * 5)
    assert group_step_advantages(returns, [1] * 5) == pytest.approx(z)


def test_degenerate_groups_give_zero_advantages() -> None:
    assert group_step_advantages([0.7, 0.7, 0.7], [1, 4, 9], eps=0.0) == [0.0, 0.0, 0.0]
    assert group_step_advantages([1.0], [3]) == [0.0]
    assert group_step_advantages([], []) == []


def test_group_step_advantages_reject_bad_input() -> None:
    with pytest.raises(ValueError, match="steps\\[1\\]"):
        group_step_advantages([1.0, -1.0], [2, 0])
    with pytest.raises(ValueError, match="2 returns but 1"):
        group_step_advantages([1.0, -1.0], [2])


# --- the tool bonus, firing rules -----------------------------------------------------------------


def test_bonus_fires_on_a_new_successful_state_changing_call() -> None:
    assert tool_bonus([rec(1)]) == {1: 0.1}
    assert tool_bonus([rec(1)], lambda_mcp=0.0) == {1: 0.0}
    assert tool_bonus([]) == {}


def test_bonus_does_not_fire_on_a_failed_call() -> None:
    assert tool_bonus([rec(1, ok=False, error_kind="tool_error")]) == {1: 0.0}


def test_bonus_does_not_fire_on_a_read_only_call_but_does_without_annotation() -> None:
    assert tool_bonus([rec(1, read_only=True)]) == {1: 0.0}
    assert tool_bonus([rec(1, read_only=None)]) == {1: 0.1}  # MCP default readOnlyHint = false


def test_bonus_fires_once_per_tool_and_arguments_key() -> None:
    calls = [rec(1), rec(2), rec(3, args={"cell": "B2"}), rec(4, name="calc__clear", args={"cell": "A1"})]
    assert tool_bonus(calls) == {1: 0.1, 2: 0.0, 3: 0.1, 4: 0.1}


def test_argument_order_does_not_change_the_key() -> None:
    a = {"cell": "A1", "value": {"x": 1, "y": [1, 2]}}
    b = {"value": {"y": [1, 2], "x": 1}, "cell": "A1"}
    assert tool_bonus([rec(1, args=a), rec(2, args=b)]) == {1: 0.1, 2: 0.0}


def test_a_failed_first_call_uses_up_its_key() -> None:
    # "key has not appeared earlier in the trajectory": the failed call did appear.
    assert tool_bonus([rec(1, ok=False, error_kind="timeout"), rec(2)]) == {1: 0.0, 2: 0.0}


def test_a_parse_error_with_no_tool_name_never_fires() -> None:
    parse_error = rec(1, name="", args={}, ok=False, error_kind="parse_error", read_only=None)
    assert tool_bonus([parse_error]) == {1: 0.0}
    assert tool_bonus([rec(1, name="", args={}, read_only=None)]) == {1: 0.0}


def test_bonus_reads_calls_in_turn_order() -> None:
    assert tool_bonus([rec(3), rec(1)]) == {1: 0.1, 3: 0.0}


# --- Eq. (4) with the bonus ----------------------------------------------------------------------


def _scores(returns: list[float], steps: list[int], calls: list[list[ToolCallRecord]]) -> list[AdoptionScore]:
    """What the Evaluator scores for each trajectory: its return, steps and per-step bonus."""
    out = []
    for r, t, log in zip(returns, steps, calls, strict=True):
        bonus = tool_bonus(log)
        out.append(
            AdoptionScore(
                shaped_return=r, steps=t, step_bonus=tuple(bonus.get(k, 0.0) for k in range(1, t + 1))
            )
        )
    return out


def test_bonus_is_added_to_the_step_after_normalisation() -> None:
    # R = [1, -1], T = [2, 2]: z = +-1/sqrt(2) = +-0.70711, / 2 = +-0.35355; trajectory 0 scores a bonus at turn 1.
    adv = step_advantages_with_bonus(_scores([1.0, -1.0], [2, 2], [[rec(1)], []]), eps=0.0)
    h = 1 / math.sqrt(2) / 2
    assert adv[0] == pytest.approx([h + 0.1, h])
    assert adv[1] == pytest.approx([-h, -h])


def test_folding_the_bonus_into_the_return_would_be_a_dead_signal() -> None:
    # Folded, R = [1.1, -1.0]: a two-member group still z-scores to +-1/sqrt(2), so the bonus vanishes.
    folded = group_step_advantages([1.0 + 0.1, -1.0], [2, 2], eps=0.0)
    plain = group_step_advantages([1.0, -1.0], [2, 2], eps=0.0)
    assert folded == pytest.approx(plain)
    # G = 4, the failing trajectory 1 (T = 10) has the bonus. Folded, R = [1, -0.9, -1, -1]: mean -0.475,
    # sample std sqrt((1.475^2 + 0.425^2 + 2*0.525^2)/3) = 0.98446, z_1 = -0.43171 (was -0.5): +0.0068 a step.
    folded4 = group_step_advantages([1.0, -0.9, -1.0, -1.0], [5, 10, 5, 5], eps=0.0)
    after = step_advantages_with_bonus(
        _scores([1.0, -1.0, -1.0, -1.0], [5, 10, 5, 5], [[], [rec(4)], [], []]), eps=0.0
    )
    assert folded4[1] == pytest.approx(-0.043171, abs=1e-6)
    assert after[1][3] == pytest.approx(-0.05 + 0.1)  # z_1 = -0.5, / 10, + lambda_mcp
    assert after[1][0] == pytest.approx(-0.05)


def test_step_advantages_with_bonus_refuse_a_bonus_per_step_that_does_not_match_the_steps() -> None:
    short = AdoptionScore(shaped_return=1.0, steps=2, step_bonus=(0.1,))
    with pytest.raises(ValueError, match="trajectory 0 has 2 steps but 1 step bonuses"):
        step_advantages_with_bonus([short, AdoptionScore(shaped_return=-1.0, steps=1, step_bonus=(0.0,))])


# --- gradient-band curation ----------------------------------------------------------------------


def test_band_edges_are_excluded() -> None:
    cur = PassRateCurator(band=(0.1, 0.9), samples=10)
    for task, passes in {"p1": 1, "p2": 2, "p8": 8, "p9": 9}.items():
        cur.update(task, [True] * passes + [False] * (10 - passes))
    assert cur.pass_rate("p1") == 0.1 and cur.pass_rate("p9") == 0.9
    assert cur.trainable(["p1", "p2", "p8", "p9"]) == ["p2", "p8"]


def test_with_G8_the_band_keeps_exactly_the_mixed_groups() -> None:
    cur = PassRateCurator()
    for passes in range(9):
        cur.update(f"t{passes}", [True] * passes + [False] * (8 - passes))
    assert cur.trainable([f"t{p}" for p in range(9)]) == [f"t{p}" for p in range(1, 8)]


def test_unprofiled_tasks_are_kept_and_order_is_preserved() -> None:
    cur = PassRateCurator(samples=2)
    cur.update("solved", [True, True])
    assert cur.trainable(["new", "solved", "other"]) == ["new", "other"]
    assert cur.pass_rate("new") is None


def test_reprofiling_replaces_a_profile() -> None:
    cur = PassRateCurator(samples=2)
    cur.update("t", [True, False])
    cur.update("t", [True, True])
    assert cur.trainable(["t"]) == []


def test_due_before_any_profile_and_then_on_schedule() -> None:
    once, every = PassRateCurator(samples=1), PassRateCurator(samples=1, reprofile_every=10)
    assert once.due(7) and every.due(0)
    once.update("t", [True])
    every.update("t", [True])
    assert [once.due(s) for s in (0, 10, 100)] == [False, False, False]
    assert [every.due(s) for s in (0, 5, 10, 20, 25)] == [False, False, True, True, False]


def test_state_round_trips_through_json() -> None:
    cur = PassRateCurator(samples=4, reprofile_every=3)
    cur.update("a", [True, False, False, False])
    cur.update("b", [True] * 4)
    fresh = PassRateCurator(samples=4, reprofile_every=3)
    fresh.load_state_dict(json.loads(json.dumps(cur.state_dict())))
    assert fresh.state_dict() == cur.state_dict() == {"profiles": {"a": [1, 4], "b": [4, 4]}}
    assert fresh.trainable(["a", "b", "c"]) == ["a", "c"]
    assert not fresh.due(1)


def test_curator_rejects_bad_configuration_input_and_state() -> None:
    with pytest.raises(ValueError, match="band"):
        PassRateCurator(band=(0.9, 0.1))
    with pytest.raises(ValueError, match="samples"):
        PassRateCurator(samples=0)
    with pytest.raises(ValueError, match="reprofile_every"):
        PassRateCurator(reprofile_every=0)
    with pytest.raises(ValueError, match="expected samples=8"):
        PassRateCurator().update("t", [True])
    with pytest.raises(ValueError, match="passes, n"):
        PassRateCurator().load_state_dict({"profiles": {"t": [5, 4]}})
    with pytest.raises(ValueError, match="profiles"):
        PassRateCurator().load_state_dict({})
