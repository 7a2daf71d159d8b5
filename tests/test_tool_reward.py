"""MCPDisCo tool reward (paper 000, §3.2 Eq. 5-8, App. A): each term pinned on a hand-computed example.

Default weights throughout: R_format = s_base = s_req = s_srv = s_tool = s_query = s_srv_match =
s_tool_match = 1, severe format error -2, missing required keys -3, terminal 1, Eq. 6 offset 2.
Per action R_tool(a) = R_format + R_correct + P; trajectory = mean over D = actions + unmatched
references, plus the terminal term.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from transformers import AutoTokenizer

from actors.tool_router import ToolRouter, route_answer
from policies.chat import format_tool_call, format_tool_result
from policies.react import EpisodeLimits, build_messages, run_episode
from policies.scripted import ScriptedEngine
from policies.tokens import ChatRecorder
from policies.tool_calls import parse_tool_call
from policies.types import SamplingConfig, ToolCall, ToolResult, ToolSpec
from rewards.ops import evaluate_op
from rewards.tool_reward import (
    ToolRewardWeights,
    best_assignment,
    execute_score,
    key_iou,
    same_value,
    split_name,
    tool_reward,
    trajectory_tool_reward,
)
from specs.domains.calculator.expert import respond as expert_respond
from specs.domains.calculator.generate import evaluate_expression
from specs.task import ReferenceCall, load_tasks
from specs.trajectory import ToolCallRecord, Trajectory

MUL = ReferenceCall(server="calculator", tool="multiply", arguments={"a": 17, "b": 25})
SUB = ReferenceCall(server="calculator", tool="subtract", arguments={"a": 425, "b": 38})


def _call(
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    turn: int = 1,
    error_kind: str | None = None,
    route_hits: list[str] | None = None,
) -> ToolCallRecord:
    return ToolCallRecord(
        turn=turn,
        name=name,
        arguments={} if arguments is None else arguments,
        ok=error_kind is None,
        error_kind=error_kind,
        latency_s=0.0,
        output_bytes=0,
        route_hits=None if route_hits is None else tuple(route_hits),
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
    query = {"query": "multiply two numbers"}
    route = _call("route", query, turn=1, route_hits=["calculator__multiply", "calculator__add"])
    # hits recall the reference server and tool: H = 1 + 1 + 1 + 1 + 1 = 5;
    # R_correct = 6*5/3 - 2 = 8; R_tool = 9. MUL stays unmatched: D = 2, total = 9/2 = 4.5
    full = tool_reward([route], [MUL], final_answer=None)
    [score] = full.calls
    assert score.kind == "route" and score.terms["H"] == 5.0 and (score.correct, score.total) == (8.0, 9.0)
    assert full.total == 4.5
    # only the server recalled: H = 4, R_correct = 6; R_tool = 7
    server_only = _call("route", query, route_hits=["calculator__add"])
    assert tool_reward([server_only], [MUL], final_answer=None).calls[0].total == 7.0
    # no hits recorded: H = 3, R_correct = 4, R_tool = 5; a failed route call recalls nothing either
    assert tool_reward([_call("route", query)], [MUL], final_answer=None).calls[0].total == 5.0
    failed = _call("route", query, error_kind="tool_error", route_hits=["calculator__multiply"])
    assert tool_reward([failed], [MUL], final_answer=None).calls[0].total == 5.0
    # a blank query loses s_query too: H = 2, R_correct = 2, R_tool = 3
    blank = tool_reward([_call("route", {"query": " "})], [MUL], final_answer=None)
    assert blank.calls[0].total == 3.0


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
        _call("route", {"query": "multiply"}, turn=1, route_hits=["calculator__multiply"]),  # recalls MUL: 9
        _parse_error(turn=2),  # -2
        _call("calculator__multiply", {"a": 17, "b": 25}, turn=3),  # exact MUL: 10
    ]  # SUB never called: D = 3 + 1 = 4
    result = tool_reward(calls, [MUL, SUB], final_answer="387")
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


# --- From a recorded trajectory: route hits from the call records, expert episodes --------------------
#
# Observations are built with the real formatters (``route_answer``, ``format_tool_result``,
# ``format_tool_call``), so a change of either format breaks these tests rather than the reward.

CALCULATE = ToolSpec(
    name="calculator__calculate",
    server="calculator",
    tool="calculate",
    description="Calculates/evaluates the given arithmetic expression.",
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
)
INVENTORY = [
    CALCULATE,
    ToolSpec(
        name="calculator__multiply",
        server="calculator",
        tool="multiply",
        description="Multiply two numbers and return the product.",
        parameters={"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
    ),
    ToolSpec(
        name="weather__get_forecast",
        server="weather",
        tool="get_forecast",
        description="Weather forecast (temperature, rain) for a city: days ahead.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    ),
]
ROUTER = ToolRouter(INVENTORY)
DATA = Path(__file__).resolve().parent.parent / "specs" / "domains" / "calculator" / "tasks"


def _assistant_call(name: str, arguments: dict[str, Any]) -> dict[str, str]:
    return {"role": "assistant", "content": format_tool_call(ToolCall(name=name, arguments=arguments))}


def _route_result(arguments: dict[str, Any]) -> ToolResult:
    # What the gateway answers a route call with (actors.mcp_gateway: the route tool is its own).
    answer = route_answer(ROUTER, arguments)
    return ToolResult(text=answer.text, server="mcprl", read_only=True, route_hits=answer.hits)


def _conversation(*turns: dict[str, str]) -> list[dict[str, Any]]:
    return [*build_messages("How many pens are there in 17 boxes of 25?", INVENTORY, None), *turns]


def _searched(query: str, k: int = 5) -> list[str]:
    return [tool.name for tool, _ in ROUTER.search(query, k)]


def _route_then_multiply(query: dict[str, str]) -> tuple[list[dict[str, Any]], list[ToolCallRecord]]:
    """An episode that routes with ``query``, multiplies 17 by 25, and answers 425."""
    messages = _conversation(
        _assistant_call("route", query),
        format_tool_result(_route_result(query)),
        _assistant_call("calculator__multiply", {"a": 17, "b": 25}),
        format_tool_result(ToolResult(text="425")),
        {"role": "assistant", "content": "The answer is 425."},
    )
    return messages, [
        _call("route", query, turn=1, route_hits=_searched(query["query"])),
        _call("calculator__multiply", {"a": 17, "b": 25}, turn=2),
    ]


def _trajectory(messages: list[dict[str, Any]], calls: list[ToolCallRecord], **fields: Any) -> Trajectory:
    return Trajectory(
        task_id="calc-x",
        group_id="g",
        token_ids=[],
        trainable=[],
        logprobs=[],
        versions=[],
        messages=messages,
        tool_calls=calls,
        **fields,
    )


def test_trajectory_tool_reward_scores_the_recorded_calls_hits_and_answer() -> None:
    query = {"query": "multiply two numbers"}
    messages, calls = _route_then_multiply(query)
    t = _trajectory(messages, calls, final_answer="The answer is 425.", num_turns=3)
    # route: hits hold calculator__multiply (server and tool recalled): H = 5, R_correct = 8, R_tool = 9
    # execute: exact MUL (|A| = 2): R_tool = 10 (first test); D = 2 -> (9 + 10)/2 = 9.5; terminal 1
    result = trajectory_tool_reward(t, [MUL], success=True)
    assert [s.total for s in result.calls] == [9.0, 10.0]
    assert result.total == 10.5
    assert trajectory_tool_reward(t, [MUL], success=False).total == 9.5  # r_term withheld
    # the same call log with no hits recorded: route H = 3 -> 5; (5 + 10)/2 + 1 = 8.5
    unrouted = [msgspec.structs.replace(calls[0], route_hits=None), calls[1]]
    assert tool_reward(unrouted, [MUL], final_answer=t.final_answer, success=True).total == 8.5


def test_trajectory_tool_reward_refuses_a_failed_episode_naming_the_task() -> None:
    t = _trajectory([], [], status="infra_failed", error="turn 1: server exited")
    with pytest.raises(ValueError, match="trajectory of task calc-x is infra_failed"):
        trajectory_tool_reward(t, [MUL], success=None)


def test_every_calculator_task_has_the_expert_call_as_its_reference() -> None:
    # For each shipped task: the call the scripted expert writes, parsed as the agent loop parses it,
    # scores R_tool(a) = 12, the most one call can earn against a 1-argument reference:
    # H = R_format 1 + s_base 1 + s_req 1 + s_srv 1 + s_tool 1 + IoU 1 + N_val 1 = 7
    # R_correct = 6*7/(2 + |A|=1) - 3 = 11; R_tool(a) = 1 + 11 + P 0 = 12
    tasks = load_tasks(DATA / "train.json") + load_tasks(DATA / "eval.json")
    for task in tasks:
        [ref] = task.reference_calls
        assert (ref.name, ref.arguments) == (
            "calculator__calculate",
            {"expression": task.private["_expression"]},
        )
        parsed = parse_tool_call(expert_respond(task, task.instruction))
        assert isinstance(parsed, ToolCall)
        [score] = tool_reward([_call(parsed.name, parsed.arguments)], [ref], final_answer=None).calls
        assert score.total == 12.0, task.instance_id


class InMemoryCalculator:
    """The ToolCaller protocol: the calculator tool (evaluated locally) and the gateway's route tool."""

    async def call(self, env_id: str, name: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        if name == "route":
            return _route_result(arguments)
        if name != CALCULATE.name:
            return ToolResult(text=f"Unknown tool {name!r}.", is_error=True, error_kind="unknown_tool")
        value = evaluate_expression(arguments["expression"])
        return ToolResult(text=str(int(value) if value.is_integer() else value), server="calculator")


async def _expert_episode(tokenizer: Any, task: Any, respond: Any) -> Trajectory:
    with anyio.fail_after(60):
        return await run_episode(
            task_id=task.instance_id,
            group_id=task.instance_id,
            messages=build_messages(task.instruction, INVENTORY, None),
            recorder=ChatRecorder(tokenizer),
            engine=ScriptedEngine(tokenizer, respond, task),
            tools=InMemoryCalculator(),
            env_id="e1",
            sampling=SamplingConfig(temperature=0.0),
            limits=EpisodeLimits(max_turns=4, max_new_tokens=128, max_context_tokens=4096),
        )


def _success(task: Any, answer: str | None) -> bool:
    [spec] = task.evaluators
    return evaluate_op(spec.func, spec.op, spec.value, spec.op_args, answer or "").passed


@pytest.mark.anyio
async def test_an_expert_episode_of_a_real_calculator_task_scores_the_maximum(model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    task = load_tasks(DATA / "train.json")[0]
    t = await _expert_episode(tokenizer, task, expert_respond)
    assert [(c.name, c.arguments) for c in t.tool_calls] == [
        ("calculator__calculate", {"expression": task.private["_expression"]})
    ]
    result = trajectory_tool_reward(t, task.reference_calls, success=_success(task, t.final_answer))
    # one exact call against |A| = 1: R_tool(a) = 12 (previous test); D = 1; correct answer: r_term 1
    # R_tool = 12/1 + 1 = 13 = format 1 + correct 11 + penalty 0 + terminal 1
    assert (result.format, result.correct, result.penalty, result.terminal) == (1.0, 11.0, 0.0, 1.0)
    assert result.total == 13.0


@pytest.mark.anyio
async def test_an_expert_that_routes_first_is_scored_on_the_hits_the_episode_recorded(
    model_dir: Path,
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    task = load_tasks(DATA / "train.json")[0]
    route = format_tool_call(ToolCall(name="route", arguments={"query": "evaluate an arithmetic expression"}))

    def routing_expert(task: Any, conversation: str) -> str:
        answered = conversation[conversation.rfind(task.instruction) :].count("<tool_response>")
        if answered == 0:
            return route
        if answered == 1:  # the expert's call, as it writes it on a fresh conversation
            return expert_respond(task, task.instruction)
        return expert_respond(task, conversation)  # states the calculator's result

    t = await _expert_episode(tokenizer, task, routing_expert)
    assert [c.name for c in t.tool_calls] == ["route", "calculator__calculate"] and _success(
        task, t.final_answer
    )
    result = trajectory_tool_reward(t, task.reference_calls, success=True)
    # route: calculator__calculate among the hits: H = 5, R_correct = 6*5/3 - 2 = 8, R_tool = 9
    # execute: exact, 12; D = 2: (9 + 12)/2 = 10.5; terminal 1 -> 11.5 (routing lowers the mean here)
    assert "calculator__calculate" in (t.tool_calls[0].route_hits or ())
    assert [s.total for s in result.calls] == [9.0, 12.0] and result.total == 11.5
