"""Evaluator ops pinned on examples: MCP-Universe func chains and comparisons, and final-number parsing."""

from __future__ import annotations

import pytest

from rewards.ops import EvalOutcome, apply_func, evaluate_op, final_number
from specs.errors import EvaluatorError
from specs.evaluator_grammar import is_generic_op, parse_func


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("The answer is 42.", 42.0),
        ("17 * 25 = 425, and 425 - 38 = 387. The answer is 387.", 387.0),
        ("The calculator gives 103.0. The answer is 103.0.", 103.0),
        ("answer: -12.5", -12.5),
        ("The answer is $1,234.", 1234.0),
        ("I got 3 apples and then 5 more, so 8", 8.0),
        ("The answer is 7, not 9 as I first thought", 7.0),
        ("between 3-5 items", 5.0),
        ("1e+20", 1e20),
        ("no digits here", None),
        ("", None),
    ],
)
def test_final_number_reads_the_final_answer_in_free_text(text: str, number: float | None) -> None:
    assert final_number(text) == number


def test_func_chains_parse_like_mcp_universe() -> None:
    steps = parse_func("json -> get(city) ")
    assert [(s.name, s.args) for s in steps] == [("json", ()), ("get", ("city",))]
    assert apply_func("json -> get(items) -> foreach -> get(n)", '{"items": [{"n": 1}, {"n": 2}]}') == [1, 2]
    assert apply_func("json -> get(items) -> len", '```json\n{"items": [1, 2, 3]}\n```') == [3]
    assert apply_func("raw -> list", "x") == [["x"]]
    assert apply_func("number", "so the answer is 12") == [12.0]


@pytest.mark.parametrize("func", ["jsn", "get", "get()", "json -> get(a, b)", "", " -> ", "json(("])
def test_a_malformed_func_is_an_evaluator_error(func: str) -> None:
    with pytest.raises(EvaluatorError):
        parse_func(func)


@pytest.mark.parametrize(
    ("func", "op", "value", "op_args", "output", "passed"),
    [
        ("json -> get(city)", "=", "Lisbon", None, '{"city": "Lisbon"}', True),
        ("json -> get(city)", "=", "Lisbon", None, '{"city": "Porto"}', False),
        ("json -> get(city)", "=", "Lisbon", None, '{"town": "Lisbon"}', False),
        ("raw", "contain", "Lisbon", None, "I think it is Lisbon.", True),
        ("raw", "contain", 42, None, "The answer is 42.", True),
        ("raw", "contain", "Lisbon", None, "Porto", False),
        ("json -> get(signal)", "in", ["buy", "sell", "hold"], None, '{"signal": "hold"}', True),
        ("json -> get(signal)", "in", ["buy", "sell", "hold"], None, '{"signal": "short"}', False),
        ("json -> get(n)", "<", 10, None, '{"n": 3}', True),
        ("json -> get(n)", ">=", 10, None, '{"n": 3}', False),
        ("json -> get(n)", "<=", 10, None, '{"n": "3"}', False),  # str vs int: a failed check, not a crash
        ("json -> get(xs) -> foreach", ">", 0, None, '{"xs": [1, 2, 3]}', True),
        ("json -> get(xs) -> foreach", ">", 0, None, '{"xs": [1, -2, 3]}', False),
        ("number", "approx", 387, {"abs_tol": 1e-6}, "The answer is 387.", True),
        ("number", "approx", 387, None, "The answer is 386.", False),
        ("number", "approx", 25, None, "The calculator gives 25.0. The answer is 25.0.", True),
        ("number", "approx", 100, {"rel_tol": 0.01}, "about 100.9", True),
        ("number", "approx", 100, 0.5, "100.6", False),
        ("number", "approx", 387, None, "I do not know.", False),
        ("raw", "approx", 387, None, "387", True),
        ("json", "", None, None, '{"a": 1}', True),
        ("json", "", None, None, "not json", False),
    ],
)
def test_generic_ops_pinned_on_examples(
    func: str, op: str, value: object, op_args: object, output: str, passed: bool
) -> None:
    outcome = evaluate_op(func, op, value, op_args, output)
    assert isinstance(outcome, EvalOutcome)
    assert outcome.passed is passed, outcome.reason
    assert bool(outcome.reason) is not passed  # a failure always says why


def test_a_failed_check_says_why() -> None:
    outcome = evaluate_op("number", "approx", 387, None, "The answer is 386.")
    assert outcome.reason == "number approx: output 386 differs from 387 by 1 (abs_tol=1e-06, rel_tol=0)"
    assert "not valid JSON" in evaluate_op("json", "=", 1, None, "{").reason


@pytest.mark.parametrize(
    ("func", "op", "value", "op_args"),
    [
        ("raw", "equals", 1, None),  # unknown op
        ("raw", "calculator.final_answer", 1, None),  # a domain op is not generic
        ("raw", "in", 5, None),  # `in` needs a list or text as value
        ("number", "approx", "many", None),  # non-numeric expected value
        ("number", "approx", 1, {"abs_tol": "tight"}),  # malformed tolerance
        ("jason", "=", 1, None),  # unknown func
    ],
)
def test_a_malformed_spec_raises_instead_of_failing_silently(
    func: str, op: str, value: object, op_args: object
) -> None:
    with pytest.raises(EvaluatorError):
        evaluate_op(func, op, value, op_args, "The answer is 1.")


def test_generic_ops_are_told_apart_from_registered_ones() -> None:
    assert is_generic_op("=") and is_generic_op("approx") and is_generic_op("")
    assert not is_generic_op("yfinance.check_portfolio_task_output")
