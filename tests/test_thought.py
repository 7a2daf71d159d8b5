"""Thought-MDP masks: reasoning spans in ``<think>`` and Harmony turns, their token masks, and the
recorder's ``reasoning`` mask over a recorded episode (real SmolLM2 tokenizer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from policies.chat import format_tool_call, format_tool_result
from policies.thought import reasoning_mask, reasoning_spans, reasoning_text
from policies.tokens import ChatRecorder
from policies.types import Generation, ToolCall, ToolResult
from specs.trajectory import Trajectory

THINK_CALL = "<think>17 and 25: add them with the calculator.</think>\n" + format_tool_call(
    ToolCall(name="calculator__calculate", arguments={"expression": "17 + 25"})
)
THINK_ANSWER = "<think>The tool said 42.</think>The answer is 42."
HARMONY = (
    "<|channel|>analysis<|message|>Need the sum.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.calc<|message|>{}<|call|>"
)


def test_think_spans_include_the_tags_and_an_unclosed_span_runs_to_the_end() -> None:
    text = "<think>plan</think>act"
    assert reasoning_spans(text, "think") == [(0, 19)] and text[19:] == "act"
    assert reasoning_spans("<think>cut by the token limi", "think") == [(0, 28)]
    assert reasoning_spans("no reasoning here", "think") == [] and reasoning_spans(text, "none") == []
    assert reasoning_text(text, "think") == "plan"


def test_harmony_reasoning_is_the_analysis_channel_only() -> None:
    ((start, end),) = reasoning_spans(HARMONY, "harmony")
    assert HARMONY[start:end] == "<|channel|>analysis<|message|>Need the sum.<|end|>"
    assert reasoning_text(HARMONY, "harmony") == "Need the sum."
    with pytest.raises(ValueError, match="reasoning format"):
        reasoning_spans(HARMONY, "xml")  # type: ignore[arg-type]


def test_a_token_belongs_to_the_side_its_first_character_is_on() -> None:
    pieces = ["<th", "ink>", "ab", "c</", "think>", "x"]  # a toy tokenizer: one piece per id

    def decode(ids: list[int]) -> str:
        return "".join(pieces[i] for i in ids)

    text = decode(list(range(6)))
    assert reasoning_mask(list(range(6)), decode, reasoning_spans(text, "think")) == [1, 1, 1, 1, 1, 0]
    assert reasoning_mask([0, 1], decode, []) == [0, 0]


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Any:
    return AutoTokenizer.from_pretrained(model_dir)


def said(tokenizer: Any, text: str) -> Generation:
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    return Generation(token_ids=ids, logprobs=[-0.5] * len(ids), version=0, finish_reason="stop")


def test_the_recorded_reasoning_mask_covers_exactly_the_think_spans_inside_trainable(tokenizer: Any) -> None:
    recorder = ChatRecorder(tokenizer, reasoning_format="think")
    recorder.start(
        [{"role": "system", "content": "Think, then act."}, {"role": "user", "content": "17 + 25?"}]
    )
    recorder.add_model_turn(said(tokenizer, THINK_CALL))
    recorder.add_messages([format_tool_result(ToolResult(text="42"))])
    recorder.add_model_turn(said(tokenizer, THINK_ANSWER))
    t = Trajectory(task_id="t", group_id="g", **recorder.trajectory_fields())
    assert len(t.reasoning) == len(t.token_ids)
    assert all(r <= m for r, m in zip(t.reasoning, t.trainable, strict=True))  # inside trainable
    assert all(not (r and a) for r, a in zip(t.reasoning, t.action, strict=True))  # disjoint
    reasoning_text_ = tokenizer.decode([i for i, r in zip(t.token_ids, t.reasoning, strict=True) if r])
    action_text = tokenizer.decode([i for i, a in zip(t.token_ids, t.action, strict=True) if a])
    assert (
        reasoning_text_
        == "<think>17 and 25: add them with the calculator.</think><think>The tool said 42.</think>"
    )
    assert action_text.startswith("\n<tool_call>") and action_text.endswith("The answer is 42.<|im_end|>")
    assert t.num_reasoning_tokens + sum(t.action) == t.num_generated_tokens


def test_without_a_reasoning_format_the_mask_is_empty_and_every_generated_token_is_action(
    tokenizer: Any,
) -> None:
    recorder = ChatRecorder(tokenizer)
    recorder.start([{"role": "user", "content": "hi"}])
    recorder.add_model_turn(said(tokenizer, THINK_ANSWER))
    t = Trajectory(task_id="t", group_id="g", **recorder.trajectory_fields())
    assert t.reasoning == [] and t.action == t.trainable
