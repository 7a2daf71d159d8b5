"""The Hermes tool format: system prompt, tool results, and parsing calls out of model text."""

from __future__ import annotations

import json

import pytest

from policies.chat import format_tool_call, format_tool_result, render_system_prompt, tool_schema
from policies.tool_calls import ToolCallParseError, parse_tool_call
from policies.types import ToolCall, ToolResult, ToolSpec

CALC = ToolSpec(
    name="calculator__calculate",
    server="calculator",
    tool="calculate",
    description="Evaluate an arithmetic expression.",
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
)


def _error(text: str) -> str:
    result = parse_tool_call(text)
    assert isinstance(result, ToolCallParseError), result
    return result.message


# -- the system prompt and tool results ---------------------------------------------------------


def test_system_prompt_lists_each_tool_as_json_inside_tools_tags() -> None:
    prompt = render_system_prompt("You are a careful assistant.", [CALC])
    assert prompt.startswith("You are a careful assistant.\n\n")
    listing = prompt.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    assert [json.loads(line) for line in listing.splitlines()] == [tool_schema(CALC)]
    assert "<tool_call>" in prompt and "</tool_call>" in prompt
    assert "final answer" in prompt


def test_system_prompt_without_tools_is_the_base_prompt() -> None:
    assert render_system_prompt("Answer briefly.", []) == "Answer briefly."


def test_tool_schema_of_a_tool_without_parameters_is_an_empty_object_schema() -> None:
    bare = ToolSpec(name="clock__now", server="clock", tool="now")
    assert tool_schema(bare)["function"]["parameters"] == {"type": "object", "properties": {}}


def test_tool_result_is_a_tool_message_wrapped_in_tool_response_tags() -> None:
    message = format_tool_result(ToolResult(text="42"))
    assert message == {"role": "tool", "content": "<tool_response>\n42\n</tool_response>"}


def test_tool_error_is_marked_with_its_kind() -> None:
    message = format_tool_result(
        ToolResult(text="deadline of 5s passed", is_error=True, error_kind="timeout")
    )
    assert message["content"] == "<tool_response>\nerror (timeout): deadline of 5s passed\n</tool_response>"


def test_tool_result_role_can_be_user_for_templates_without_a_tool_role() -> None:
    assert format_tool_result(ToolResult(text="ok"), role="user")["role"] == "user"


def test_formatted_tool_call_parses_back_to_the_same_call() -> None:
    call = ToolCall(name="calculator__calculate", arguments={"expression": "17 + 25", "note": "é ✓"})
    assert parse_tool_call("Let me compute.\n" + format_tool_call(call)) == call


# -- parsing: calls and final answers -----------------------------------------------------------


def test_text_without_a_tool_call_tag_is_a_final_answer() -> None:
    assert parse_tool_call("The answer is 42.") is None
    assert parse_tool_call("") is None


def test_well_formed_call_is_parsed() -> None:
    text = '<tool_call>{"name": "calculator__calculate", "arguments": {"expression": "2*3"}}</tool_call>'
    assert parse_tool_call(text) == ToolCall(name="calculator__calculate", arguments={"expression": "2*3"})


def test_whitespace_and_prose_around_the_call_are_tolerated() -> None:
    text = 'I will use the tool.\n<tool_call>\n  {"name": "a__b",\n "arguments": {"x": 1}}  \n</tool_call>\nDone.'
    assert parse_tool_call(text) == ToolCall(name="a__b", arguments={"x": 1})


def test_missing_closing_tag_at_the_end_of_the_turn_is_tolerated() -> None:
    assert parse_tool_call('<tool_call>\n{"name": "a__b", "arguments": {}}\n') == ToolCall(
        name="a__b", arguments={}
    )


def test_arguments_given_as_a_json_string_are_decoded() -> None:
    text = '<tool_call>{"name": "a__b", "arguments": "{\\"x\\": [1, 2]}"}</tool_call>'
    assert parse_tool_call(text) == ToolCall(name="a__b", arguments={"x": [1, 2]})


def test_parameters_key_and_missing_arguments_are_accepted() -> None:
    assert parse_tool_call('<tool_call>{"name": "a__b", "parameters": {"y": 2}}</tool_call>') == ToolCall(
        name="a__b", arguments={"y": 2}
    )
    assert parse_tool_call('<tool_call>{"name": "clock__now"}</tool_call>') == ToolCall(
        name="clock__now", arguments={}
    )


def test_code_fence_around_the_json_is_tolerated() -> None:
    text = '<tool_call>\n```json\n{"name": "a__b", "arguments": {"x": 1}}\n```\n</tool_call>'
    assert parse_tool_call(text) == ToolCall(name="a__b", arguments={"x": 1})


def test_raw_newline_inside_a_json_string_is_tolerated() -> None:
    text = '<tool_call>{"name": "py__run", "arguments": {"code": "x = 1\nprint(x)"}}</tool_call>'
    assert parse_tool_call(text) == ToolCall(name="py__run", arguments={"code": "x = 1\nprint(x)"})


# -- parsing: malformed calls become readable errors --------------------------------------------


def test_invalid_json_is_an_error_that_says_so_and_shows_the_expected_syntax() -> None:
    message = _error('<tool_call>{"name": "a__b", "arguments": {"x": }}</tool_call>')
    assert message.startswith("tool call is not valid JSON: ")
    assert '<tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>' in message


def test_a_call_cut_off_mid_json_is_an_invalid_json_error() -> None:
    assert _error('<tool_call>{"name": "a__b", "argum').startswith("tool call is not valid JSON")


def test_missing_name_is_an_error() -> None:
    assert _error('<tool_call>{"arguments": {"x": 1}}</tool_call>').startswith("tool call is missing 'name'")


@pytest.mark.parametrize("name", ['""', "3", "null", '["a"]'])
def test_name_that_is_not_a_non_empty_string_is_an_error(name: str) -> None:
    assert "'name' must be a non-empty string" in _error(f'<tool_call>{{"name": {name}}}</tool_call>')


@pytest.mark.parametrize("arguments", ["[1, 2]", "7", '"not json"', '"[1]"'])
def test_arguments_that_are_not_an_object_are_an_error(arguments: str) -> None:
    message = _error(f'<tool_call>{{"name": "a__b", "arguments": {arguments}}}</tool_call>')
    assert "arguments" in message and ("must be an object" in message or "not valid JSON" in message)


def test_arguments_array_error_names_the_type_it_got() -> None:
    assert _error('<tool_call>{"name": "a__b", "arguments": [1]}</tool_call>').startswith(
        "arguments must be an object, got list"
    )


def test_more_than_one_tool_call_is_an_error() -> None:
    one = '<tool_call>{"name": "a__b", "arguments": {}}</tool_call>'
    assert _error(one + "\n" + one).startswith("more than one tool call")


def test_json_that_is_not_an_object_is_an_error() -> None:
    assert _error('<tool_call>["a__b", {}]</tool_call>').startswith(
        "tool call must be a JSON object, got list"
    )


def test_text_after_the_json_object_inside_the_tags_is_an_error() -> None:
    message = _error('<tool_call>{"name": "a__b", "arguments": {}}}</tool_call>')
    assert message.startswith("unexpected text after the JSON object")


def test_empty_tool_call_is_an_error() -> None:
    assert _error("<tool_call>\n</tool_call>").startswith("empty tool call")


def test_parse_error_becomes_a_parse_error_tool_result() -> None:
    error = parse_tool_call("<tool_call>{oops</tool_call>")
    assert isinstance(error, ToolCallParseError)
    result = error.as_result()
    assert result.is_error and result.error_kind == "parse_error" and result.text == error.message
    assert error.raw == "{oops"
