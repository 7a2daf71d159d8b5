"""MCPDisCo tool reward (paper 000, §3.2 Eq. 5-8, App. A): each term pinned on a hand-computed example.

Default weights throughout: R_format = s_base = s_req = s_srv = s_tool = s_query = s_srv_match =
s_tool_match = 1, severe format error -2, missing required keys -3, terminal 1, Eq. 6 offset 2.
Per action R_tool(a) = R_format + R_correct + P; trajectory = mean over D = actions + unmatched
references, plus the terminal term.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from policies.types import ToolCallRecord
from rewards.tool_reward import (
    ToolRewardWeights,
    best_assignment,
    execute_score,
    key_iou,
    same_value,
    split_name,
    tool_reward,
)
from specs.task import ReferenceCall

MUL = ReferenceCall(server="calculator", tool="multiply", arguments={"a": 17, "b": 25})
SUB = ReferenceCall(server="calculator", tool="subtract", arguments={"a": 425, "b": 38})


def _call(
    name: str, arguments: dict[str, Any] | None = None, *, turn: int = 1, error_kind: str | None = None
) -> ToolCallRecord:
    return ToolCallRecord(
        turn=turn,
        name=name,
        arguments={} if arguments is None else arguments,
        ok=error_kind is None,
        error_kind=error_kind,
        latency_s=0.0,
        output_bytes=0,
    )


def _parse_error(turn: int = 1) -> ToolCallRecord:
    # What policies.react records for a turn whose <tool_call> could not be parsed.
    return _call("", {}, turn=turn, error_kind="parse_error")


def _one(call: ToolCallRecord, ref: ReferenceCall = MUL) -> float:
    return tool_reward([call], [ref], final_answer=None).total


# --- Execute actions: Eq. 5 and Eq. 6 -----------------------------------------------------------


def test_an_exact_call_scores_every_term_of_eq5() -> None:
    # H = R_format 1 + s_base 1 + s_req 1 + s_srv 1 + s_tool 1 + IoU 2/2 + N_val 2 = 8
    # R_correct = 6*8/(2+2) - 3 = 9; R_tool = R_format 1 + 9 = 10; D = 1
    result = tool_reward([_call("calculator__multiply", {"a": 17, "b": 25})], [MUL], final_answer=None)
    [score] = result.calls
    assert score.terms == {
        "R_format": 1.0,
        "s_base": 1.0,
        "s_req": 1.0,
        "s_srv": 1.0,
        "s_tool": 1.0,
        "IoU_keys": 1.0,
        "N_val_match": 2.0,
        "H": 8.0,
    }
    assert (score.kind, score.reference, score.format, score.correct, score.penalty) == (
        "execute",
        0,
        1.0,
        9.0,
        0.0,
    )
    assert score.total == 10.0
    assert (result.total, result.format, result.correct, result.penalty, result.terminal) == (
        10.0,
        1.0,
        9.0,
        0.0,
        0.0,
    )
    assert result.slots == 1 and result.unmatched_references == ()


def test_a_wrong_server_loses_s_srv() -> None:
    # H = 8 - s_srv 1 = 7; R_correct = 6*7/4 - 3 = 7.5; R_tool = 1 + 7.5 = 8.5
    assert _one(_call("calc__multiply", {"a": 17, "b": 25})) == pytest.approx(8.5)


def test_a_wrong_tool_loses_s_tool() -> None:
    # H = 8 - s_tool 1 = 7; R_correct = 7.5; R_tool = 8.5
    assert _one(_call("calculator__add", {"a": 17, "b": 25})) == pytest.approx(8.5)


def test_a_name_without_a_server_part_matches_no_server() -> None:
    # "multiply" -> server "", tool "multiply": H = 7, R_tool = 8.5 as for a wrong server
    assert split_name("multiply") == ("", "multiply")
    assert split_name("calculator__multiply") == ("calculator", "multiply")
    assert _one(_call("multiply", {"a": 17, "b": 25})) == pytest.approx(8.5)


def test_a_missing_required_key_loses_s_req_and_is_penalised() -> None:
    # call {a: 17}: s_req 0, IoU |{a}|/|{a,b}| = 1/2, N_val 1
    # H = 1 + 1 + 0 + 1 + 1 + 0.5 + 1 = 5.5; R_correct = 6*5.5/4 - 3 = 5.25; P = -3
    # R_tool = 1 + 5.25 - 3 = 3.25
    [score] = tool_reward([_call("calculator__multiply", {"a": 17})], [MUL], final_answer=None).calls
    assert score.terms["s_req"] == 0.0 and score.terms["IoU_keys"] == 0.5 and score.terms["H"] == 5.5
    assert (score.correct, score.penalty, score.total) == (5.25, -3.0, 3.25)


def test_only_the_required_keys_are_required() -> None:
    # reference {a, b, note} with required (a, b); call {a: 17, b: 25}: s_req 1, no penalty
    # IoU 2/3, N_val 2: H = 5 + 2/3 + 2 = 23/3; R_correct = 6*(23/3)/(2+3) - 3 = 46/5 - 3 = 6.2
    # R_tool = 1 + 6.2 = 7.2
    ref = ReferenceCall(
        server="calculator", tool="multiply", arguments={"a": 17, "b": 25, "note": "x"}, required=("a", "b")
    )
    [score] = tool_reward([_call("calculator__multiply", {"a": 17, "b": 25})], [ref], final_answer=None).calls
    assert score.penalty == 0.0 and score.total == pytest.approx(7.2)


def test_extra_keys_lower_the_key_iou_only() -> None:
    # call {a: 17, b: 25, c: 1}: IoU |{a,b}|/|{a,b,c}| = 2/3, N_val 2, s_req 1
    # H = 5 + 2/3 + 2 = 23/3; R_correct = 6*(23/3)/4 - 3 = 11.5 - 3 = 8.5; R_tool = 9.5
    [score] = tool_reward(
        [_call("calculator__multiply", {"a": 17, "b": 25, "c": 1})], [MUL], final_answer=None
    ).calls
    assert score.terms["IoU_keys"] == pytest.approx(2 / 3)
    assert score.penalty == 0.0 and score.total == pytest.approx(9.5)


def test_matched_values_are_rescaled_by_the_number_of_reference_arguments() -> None:
    ref4 = ReferenceCall(server="s", tool="t", arguments={"a": 1, "b": 2, "c": 3, "d": 4})
    half = {"a": 1, "b": 2, "c": 0, "d": 0}
    # 2 of 4 values: H = 5 + IoU 1 + N_val 2 = 8; R_correct = 6*8/(2+4) - 3 = 5; R_tool = 6
    assert _one(_call("s__t", half), ref4) == pytest.approx(6.0)
    # 4 of 4 values: H = 5 + 1 + 4 = 10; R_correct = 6*10/6 - 3 = 7; R_tool = 8
    assert _one(_call("s__t", {"a": 1, "b": 2, "c": 3, "d": 4}), ref4) == pytest.approx(8.0)
    # 0 of 4 values: H = 6; R_correct = 6*6/6 - 3 = 3; R_tool = 4
    assert _one(_call("s__t", {"a": 0, "b": 0, "c": 0, "d": 0}), ref4) == pytest.approx(4.0)
    # the same 2 matched values against a 2-argument reference: H = 8, R_correct = 6*8/4 - 3 = 9
    assert _one(_call("calculator__multiply", {"a": 17, "b": 25})) == pytest.approx(10.0)


def test_a_tool_without_arguments_called_without_arguments_is_exact() -> None:
    # reference {} and call {}: s_req 1 (nothing required), IoU 1 (both empty), N_val 0
    # H = 6; R_correct = 6*6/(2+0) - 3 = 15; R_tool = 16
    ref = ReferenceCall(server="time", tool="now")
    assert key_iou([], []) == 1.0
    assert _one(_call("time__now"), ref) == pytest.approx(16.0)


def test_values_match_exactly_as_json() -> None:
    assert same_value(1, 1.0) and same_value({"x": [1, {"y": "z"}]}, {"x": (1, {"y": "z"})})
    assert not same_value(True, 1) and not same_value(1, True) and not same_value("17", 17)
    assert (
        not same_value(None, 0)
        and not same_value([1, 2], [2, 1])
        and not same_value({"x": 1}, {"x": 1, "y": 2})
    )
    # "17" for 17 and True for 25: no value matches; H = 5 + 1 + 0 = 6; R_correct = 6; R_tool = 7
    assert _one(_call("calculator__multiply", {"a": "17", "b": True})) == pytest.approx(7.0)


# --- Severe format errors, route actions, no calls -------------------------------------------------


def test_a_parse_error_is_a_severe_format_error() -> None:
    # nothing to evaluate: R_format 0, R_correct 0, P = -2. It is not an execute call, so MUL stays
    # unmatched: D = 1 action + 1 unmatched reference = 2, R_tool = -2/2 = -1
    result = tool_reward([_parse_error()], [MUL], final_answer=None)
    [score] = result.calls
    assert (score.kind, score.format, score.correct, score.penalty, score.total) == (
        "format_error",
        0.0,
        0.0,
        -2.0,
        -2.0,
    )
    assert result.slots == 2 and result.unmatched_references == (0,)
    assert result.total == -1.0 and result.penalty == -1.0
    # without references: D = 1, R_tool = -2
    assert tool_reward([_parse_error()], [], final_answer=None).total == -2.0


def test_other_tool_errors_are_not_format_errors() -> None:
    # an unknown tool or bad arguments was parsed: scored by Eq. 5-6 (here: wrong tool, H = 7 -> 8.5)
    call = _call("calculator__mul", {"a": 17, "b": 25}, error_kind="unknown_tool")
    assert _one(call) == pytest.approx(8.5)


def test_no_calls_at_all() -> None:
    # two references, no call: D = 0 + 2, sum 0 -> 0; a final answer adds the terminal 1
    result = tool_reward([], [MUL, SUB], final_answer=None)
    assert (result.total, result.slots, result.unmatched_references) == (0.0, 2, (0, 1))
    assert tool_reward([], [MUL, SUB], final_answer="387").total == 1.0
    # no references either: D = 0, only the terminal term
    assert tool_reward([], [], final_answer=None).total == 0.0
    assert tool_reward([], [], final_answer="387").total == 1.0


def test_a_route_call_is_scored_by_eq7_and_eq8() -> None:
    route = _call("route", {"query": "multiply two numbers"}, turn=1)
    # hits recall the reference server and tool: H = 1 + 1 + 1 + 1 + 1 = 5;
    # R_correct = 6*5/3 - 2 = 8; R_tool = 9. MUL stays unmatched: D = 2, total = 9/2 = 4.5
    full = tool_reward(
        [route], [MUL], final_answer=None, route_hits={1: ["calculator__multiply", "calculator__add"]}
    )
    [score] = full.calls
    assert score.kind == "route" and score.terms["H"] == 5.0 and (score.correct, score.total) == (8.0, 9.0)
    assert full.total == 4.5
    # only the server recalled: H = 4, R_correct = 6; R_tool = 7
    server_only = tool_reward([route], [MUL], final_answer=None, route_hits={1: ["calculator__add"]})
    assert server_only.calls[0].total == 7.0
    # hits unknown (none given): H = 3, R_correct = 4, R_tool = 5
    assert tool_reward([route], [MUL], final_answer=None).calls[0].total == 5.0
    # a blank query loses s_query too: H = 2, R_correct = 2, R_tool = 3
    blank = tool_reward([_call("route", {"query": " "})], [MUL], final_answer=None)
    assert blank.calls[0].total == 3.0


def test_route_hits_must_be_a_list_of_names() -> None:
    with pytest.raises(ValueError, match="route hits of turn 1: expected a list of tool names"):
        tool_reward(
            [_call("route", {"query": "x"})], [MUL], final_answer=None, route_hits={1: "calculator__add"}
        )


# --- Matching and aggregation ---------------------------------------------------------------------


def test_more_calls_than_references_pays_the_extra_calls_the_format_term_only() -> None:
    calls = [
        _call("calculator__multiply", {"a": 17, "b": 25}, turn=1),
        _call("calculator__multiply", {"a": 17, "b": 25}, turn=2),  # a repeat is not paid twice
        _call("calculator__add", {"x": 1}, turn=3),
    ]
    # one exact match (10), two unmatched calls (R_format 1 each); D = 3: (10 + 1 + 1)/3 = 4
    result = tool_reward(calls, [MUL], final_answer=None)
    assert [(s.reference, s.total) for s in result.calls] == [(0, 10.0), (None, 1.0), (None, 1.0)]
    assert result.total == pytest.approx(4.0)
    assert (result.format, result.correct, result.penalty) == (pytest.approx(1.0), pytest.approx(3.0), 0.0)


def test_fewer_calls_than_references_counts_the_missing_ones_as_zero() -> None:
    # MUL exact (10), SUB never called: D = 1 + 1 = 2, total = 10/2 = 5
    result = tool_reward([_call("calculator__multiply", {"a": 17, "b": 25})], [MUL, SUB], final_answer=None)
    assert result.total == 5.0 and result.unmatched_references == (1,)


def test_calls_are_matched_to_the_best_reference_not_by_order() -> None:
    # the calls come in the reverse order of the references: each still meets its own reference
    calls = [
        _call("calculator__subtract", {"a": 425, "b": 38}, turn=1),
        _call("calculator__multiply", {"a": 17, "b": 25}, turn=2),
    ]
    result = tool_reward(calls, [MUL, SUB], final_answer=None)
    assert [s.reference for s in result.calls] == [1, 0]
    assert result.total == 10.0  # (10 + 10)/2
    # a failed first attempt and its retry compete for one reference; the retry wins, the attempt
    # is an extra call: retry 10, attempt {a: 17} unmatched 1; D = 2 -> 5.5
    retry = [
        _call("calculator__multiply", {"a": 17}, turn=1),
        _call("calculator__multiply", {"a": 17, "b": 25}, turn=2),
    ]
    assert tool_reward(retry, [MUL], final_answer=None).total == 5.5


def test_a_task_without_references_gets_the_format_term_only() -> None:
    # a parsed call: R_format 1; a parse error: -2; D = 2 -> (1 - 2)/2 = -0.5; answer +1 -> 0.5
    calls = [_call("calculator__multiply", {"a": 17, "b": 25}, turn=1), _parse_error(turn=2)]
    result = tool_reward(calls, [], final_answer="425")
    assert [s.total for s in result.calls] == [1.0, -2.0]
    assert result.calls[0].terms == {} and result.calls[0].reference is None
    assert (result.format, result.correct, result.penalty, result.terminal) == (0.5, 0.0, -1.0, 1.0)
    assert result.total == 0.5
    # a route call without references: format only
    assert tool_reward([_call("route", {"query": "x"})], [], final_answer=None).total == 1.0


def test_a_whole_trajectory_sums_its_components() -> None:
    calls = [
        _call("route", {"query": "multiply"}, turn=1),  # recalls MUL: 9
        _parse_error(turn=2),  # -2
        _call("calculator__multiply", {"a": 17, "b": 25}, turn=3),  # exact MUL: 10
    ]  # SUB never called: D = 3 + 1 = 4
    result = tool_reward(calls, [MUL, SUB], final_answer="387", route_hits={1: ["calculator__multiply"]})
    # format (1 + 0 + 1)/4 = 0.5; correct (8 + 0 + 9)/4 = 4.25; penalty -2/4 = -0.5; terminal 1
    # total = 17/4 + 1 = 5.25 = 0.5 + 4.25 - 0.5 + 1
    assert (result.format, result.correct, result.penalty, result.terminal) == (0.5, 4.25, -0.5, 1.0)
    assert result.total == 5.25
    assert [s.index for s in result.calls] == [0, 1, 2] and result.unmatched_references == (1,)


def test_best_assignment_beats_greedy_and_handles_rectangles() -> None:
    # greedy takes (0,0)=10 then (1,1)=0: 10; the optimum is (0,1)+(1,0) = 9 + 9 = 18
    assert best_assignment([[10, 9], [9, 0]]) == [(0, 1), (1, 0)]
    # 3 rows, 2 columns: two pairs; best is (0,1)=5 + (2,0)=4 = 9 (row 1 left out)
    assert best_assignment([[1, 5], [2, 3], [4, 1]]) == [(0, 1), (2, 0)]
    assert best_assignment([[1, 5, 0]]) == [(0, 1)]
    assert best_assignment([]) == [] and best_assignment([[], []]) == []
    with pytest.raises(ValueError, match="rectangular"):
        best_assignment([[1, 2], [3]])


def test_best_assignment_agrees_with_brute_force_on_random_matrices() -> None:
    rng = random.Random(0)
    for _ in range(200):
        rows, cols = rng.randint(1, 5), rng.randint(1, 5)
        m = [
            [rng.choice([-3.0, 0.0, 1.5, 2.0, rng.uniform(-5, 10)]) for _ in range(cols)] for _ in range(rows)
        ]
        pairs = best_assignment(m)
        assert len(pairs) == min(rows, cols)
        assert len({i for i, _ in pairs}) == len({j for _, j in pairs}) == len(pairs)
        if rows <= cols:
            best = max(
                sum(m[i][p[i]] for i in range(rows)) for p in itertools.permutations(range(cols), rows)
            )
        else:
            best = max(
                sum(m[p[j]][j] for j in range(cols)) for p in itertools.permutations(range(rows), cols)
            )
        assert sum(m[i][j] for i, j in pairs) == pytest.approx(best)


# --- Terminal shaping and weights -----------------------------------------------------------------


def test_terminal_shaping_needs_a_well_formed_final_answer_and_no_failed_verdict() -> None:
    assert tool_reward([], [], final_answer="387").terminal == 1.0
    assert tool_reward([], [], final_answer="387", success=True).terminal == 1.0
    assert tool_reward([], [], final_answer="387", success=False).terminal == 0.0
    assert tool_reward([], [], final_answer=" \n").terminal == 0.0  # blank
    assert tool_reward([], [], final_answer=None).terminal == 0.0  # cut by a limit


def test_weights_change_each_term() -> None:
    w = ToolRewardWeights(server=0.5, missing_required_penalty=-1.0, terminal=0.25, exec_norm_offset=6.0)
    # call {a: 17} on a wrong server: H = 1 + 1 + 0 + 0 + 1 + 0.5 + 1 = 4.5
    # R_correct = 6*4.5/(6+2) - 3 = 0.375; P = -1; R_tool = 1 + 0.375 - 1 = 0.375; + terminal 0.25
    result = tool_reward([_call("calc__multiply", {"a": 17})], [MUL], final_answer="x", weights=w)
    assert result.calls[0].total == pytest.approx(0.375) and result.total == pytest.approx(0.625)
    # with offset 6 an exact call reaches R_correct = 6*8/8 - 3 = 3 (the [-3, 3] reading of Eq. 6)
    exact = execute_score(
        _call("calculator__multiply", {"a": 17, "b": 25}), MUL, ToolRewardWeights(exec_norm_offset=6.0)
    )
    assert exact.correct == 3.0


def test_bad_weights_are_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="ToolRewardWeights.exec_norm_offset: expected > 0"):
        ToolRewardWeights(exec_norm_offset=0.0)
    with pytest.raises(ValueError, match="ToolRewardWeights.terminal: expected a finite number"):
        ToolRewardWeights(terminal=float("nan"))
