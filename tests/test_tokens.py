"""Token-exact chat recording on the real SmolLM2 tokenizer and chat template (no engine needed).

Model turns are built the way an engine returns them: token ids of the assistant text followed by
eos (``<|im_end|>``, id 2), with fake logprobs that differ per token so misplacement shows.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from policies.chat import format_tool_call, format_tool_result, render_system_prompt
from policies.tokens import ChatRecorder, RecorderError
from policies.types import Generation, ToolCall, ToolResult, ToolSpec
from specs.trajectory import Trajectory

CALC = ToolSpec(
    name="calculator__calculate", server="calculator", tool="calculate", description="Arithmetic."
)
CALL_TEXT = "I will compute it.\n" + format_tool_call(
    ToolCall(name="calculator__calculate", arguments={"expression": "17 + 25"})
)
ANSWER_TEXT = "17 + 25 = 42. The answer is 42."

# ChatML like SmolLM2's, except that every assistant turn but the last is replaced by a
# placeholder: a template that rewrites history (as reasoning-stripping templates do).
REWRITING_TEMPLATE = (
    "{%- set ns = namespace(last=-1) -%}"
    "{%- for m in messages %}{% if m['role'] == 'assistant' %}{% set ns.last = loop.index0 %}{% endif %}"
    "{% endfor -%}"
    "{%- for m in messages -%}{{ '<|im_start|>' + m['role'] + '\n' }}"
    "{%- if m['role'] == 'assistant' and loop.index0 < ns.last %}[earlier turn omitted]"
    "{%- else %}{{ m['content'] }}{% endif %}{{ '<|im_end|>\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif -%}"
)


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def opening() -> list[dict[str, Any]]:
    system = render_system_prompt("You are a careful assistant.", [CALC])
    return [{"role": "system", "content": system}, {"role": "user", "content": "What is 17 + 25?"}]


def turn(ids: list[int], *, version: int = 0, stopped: bool = True) -> Generation:
    logprobs = [-0.01 * (i + 1) for i in range(len(ids))]
    return Generation(
        token_ids=ids, logprobs=logprobs, version=version, finish_reason="stop" if stopped else "length"
    )


def said(tokenizer: Any, text: str, *, version: int = 0) -> Generation:
    """A turn whose tokens are the canonical encoding of ``text`` followed by eos."""
    return turn(tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id], version=version)


def rendered_ids(tokenizer: Any, messages: list[dict[str, Any]], *, prompt: bool) -> list[int]:
    return list(
        tokenizer.apply_chat_template(
            messages, tokenize=True, add_generation_prompt=prompt, return_dict=False
        )
    )


def text_of(tokenizer: Any, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def record_tool_episode(tokenizer: Any) -> tuple[ChatRecorder, list[Generation]]:
    """system + user -> tool call -> tool result -> final answer, all canonical."""
    recorder = ChatRecorder(tokenizer)
    recorder.start(opening())
    gens = [said(tokenizer, CALL_TEXT, version=3), said(tokenizer, ANSWER_TEXT, version=4)]
    recorder.add_model_turn(gens[0])
    recorder.add_messages([format_tool_result(ToolResult(text="42"))])
    recorder.add_model_turn(gens[1])
    return recorder, gens


def test_canonical_conversation_records_exactly_the_ids_of_its_rendering(tokenizer: Any) -> None:
    recorder, _ = record_tool_episode(tokenizer)
    full = rendered_ids(tokenizer, recorder.messages, prompt=False)
    newline = tokenizer.encode("\n", add_special_tokens=False)
    # The template ends each turn with "<|im_end|>\n"; the model stopped at <|im_end|>.
    assert recorder.token_ids == full[:-1] and full[-1:] == newline
    assert recorder.segment_starts == [0]
    assert [m["role"] for m in recorder.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert recorder.messages[2]["content"] == CALL_TEXT and recorder.messages[4]["content"] == ANSWER_TEXT


def test_recorded_ids_decode_to_the_rendered_conversation(tokenizer: Any) -> None:
    recorder, _ = record_tool_episode(tokenizer)
    text = tokenizer.apply_chat_template(recorder.messages, tokenize=False)
    assert text_of(tokenizer, recorder.token_ids) + "\n" == text


def test_each_prompt_is_the_rendering_of_the_messages_so_far(tokenizer: Any) -> None:
    recorder = ChatRecorder(tokenizer)
    messages = opening()
    assert recorder.start(messages) == rendered_ids(tokenizer, messages, prompt=True)
    recorder.add_model_turn(said(tokenizer, CALL_TEXT))
    prompt = recorder.add_messages([format_tool_result(ToolResult(text="42"))])
    assert prompt == rendered_ids(tokenizer, recorder.messages, prompt=True) == recorder.token_ids


def test_trainable_mask_and_logprobs_cover_exactly_the_model_tokens(tokenizer: Any) -> None:
    recorder, gens = record_tool_episode(tokenizer)
    ids, mask, logprobs = recorder.token_ids, recorder.trainable, recorder.logprobs
    assert len(ids) == len(mask) == len(logprobs) == len(recorder)
    spans = [i for i, m in enumerate(mask) if m]
    first, second = gens[0].token_ids, gens[1].token_ids
    # Two contiguous runs: the tool-call turn, then the final answer which ends the sequence.
    start_1 = spans[0]
    start_2 = len(ids) - len(second)
    assert spans == list(range(start_1, start_1 + len(first))) + list(range(start_2, len(ids)))
    assert ids[start_1 : start_1 + len(first)] == first and ids[start_2:] == second
    assert (
        logprobs[start_1 : start_1 + len(first)] == gens[0].logprobs
        and logprobs[start_2:] == gens[1].logprobs
    )
    assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if not m)
    assert ids[start_1 + len(first) - 1] == ids[-1] == tokenizer.eos_token_id  # eos is trainable
    assert recorder.versions == [3, 4]


def test_newline_after_end_of_turn_is_present_and_untrainable(tokenizer: Any) -> None:
    recorder, gens = record_tool_episode(tokenizer)
    ids, mask = recorder.token_ids, recorder.trainable
    eos_at = mask.index(1) + len(gens[0].token_ids) - 1
    assert ids[eos_at] == tokenizer.eos_token_id and mask[eos_at] == 1
    assert ids[eos_at + 1 : eos_at + 3] == tokenizer.encode("\n<|im_start|>", add_special_tokens=False)
    assert mask[eos_at + 1] == 0


def test_sampled_non_canonical_tokenisation_is_kept_verbatim(tokenizer: Any) -> None:
    # One token per character: the same text as the canonical encoding, other ids.
    sampled = [t for ch in ANSWER_TEXT for t in tokenizer.encode(ch, add_special_tokens=False)]
    assert sampled != tokenizer.encode(ANSWER_TEXT, add_special_tokens=False)
    recorder = ChatRecorder(tokenizer)
    recorder.start(opening())
    assert recorder.add_model_turn(turn(sampled + [tokenizer.eos_token_id])) == ANSWER_TEXT
    prompt = recorder.add_messages([{"role": "user", "content": "Are you sure?"}])
    ids = recorder.token_ids
    start = recorder.trainable.index(1)
    assert ids[start : start + len(sampled) + 1] == sampled + [tokenizer.eos_token_id]
    assert prompt == ids and recorder.segment_starts == [0]
    expected = tokenizer.apply_chat_template(recorder.messages, tokenize=False, add_generation_prompt=True)
    assert text_of(tokenizer, ids) == expected


def test_special_token_sampled_inside_a_turn_stays_in_the_model_span(tokenizer: Any) -> None:
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    sampled = tokenizer.encode("Hi", add_special_tokens=False) + [im_start, tokenizer.eos_token_id]
    recorder = ChatRecorder(tokenizer)
    recorder.start(opening())
    assert recorder.add_model_turn(turn(sampled)) == "Hi<|im_start|>"
    recorder.add_messages([{"role": "user", "content": "Go on."}])
    start = recorder.trainable.index(1)
    assert recorder.token_ids[start : start + len(sampled)] == sampled
    assert sum(recorder.trainable) == len(sampled) and recorder.segment_starts == [0]


def test_turn_cut_at_max_tokens_gets_the_templates_end_of_turn_untrainable(tokenizer: Any) -> None:
    cut = tokenizer.encode(CALL_TEXT, add_special_tokens=False)[:6]
    recorder = ChatRecorder(tokenizer)
    recorder.start(opening())
    text = recorder.add_model_turn(turn(cut, stopped=False))
    assert text == text_of(tokenizer, cut)
    recorder.add_messages([{"role": "user", "content": "You were cut off; answer briefly."}])
    ids, mask = recorder.token_ids, recorder.trainable
    end = mask.index(1) + len(cut)
    assert ids[end - len(cut) : end] == cut and all(mask[end - len(cut) : end])
    assert ids[end : end + 3] == tokenizer.encode("<|im_end|>\n<|im_start|>", add_special_tokens=False)
    assert not any(mask[end:]) and sum(mask) == len(cut)
    expected = tokenizer.apply_chat_template(recorder.messages, tokenize=False, add_generation_prompt=True)
    assert text_of(tokenizer, ids) == expected and recorder.segment_starts == [0]


def test_turn_cut_inside_a_multibyte_character_stays_consistent(tokenizer: Any) -> None:
    smile = tokenizer.encode("🙂", add_special_tokens=False)
    assert len(smile) == 2  # the emoji's four bytes span two byte-level tokens
    cut = tokenizer.encode("Sure", add_special_tokens=False) + smile[:1]  # ends mid-character
    assert "\ufffd" in text_of(tokenizer, cut)
    recorder = ChatRecorder(tokenizer)
    recorder.start(opening())
    recorder.add_model_turn(turn(cut, stopped=False))
    prompt = recorder.add_messages([{"role": "user", "content": "Continue."}])
    start = recorder.trainable.index(1)
    assert prompt[start : start + len(cut)] == cut  # the partial bytes were not re-tokenized
    assert prompt[start + len(cut)] == tokenizer.eos_token_id
    assert recorder.trainable[start + len(cut)] == 0 and recorder.segment_starts == [0]


def test_template_that_rewrites_history_starts_a_new_untrainable_segment(tokenizer: Any) -> None:
    rewriting = copy.deepcopy(tokenizer)
    rewriting.chat_template = REWRITING_TEMPLATE
    recorder = ChatRecorder(rewriting)
    recorder.start(opening())
    gens = [said(rewriting, CALL_TEXT), said(rewriting, CALL_TEXT), said(rewriting, ANSWER_TEXT)]
    recorder.add_model_turn(gens[0])
    recorder.add_messages([format_tool_result(ToolResult(text="42"))])
    assert recorder.segment_starts == [0]  # the last assistant turn is still rendered in full
    recorder.add_model_turn(gens[1])
    before = recorder.token_ids
    prompt = recorder.add_messages([format_tool_result(ToolResult(text="42"))])

    # Turn 1 is now rendered as a placeholder: the old tokens stay, a new segment follows them.
    assert recorder.segment_starts == [0, len(before)]
    assert recorder.token_ids[: len(before)] == before
    assert (
        prompt == recorder.token_ids[len(before) :] == rendered_ids(rewriting, recorder.messages, prompt=True)
    )
    assert "[earlier turn omitted]" in text_of(rewriting, prompt)
    assert not any(recorder.trainable[len(before) :])

    recorder.add_model_turn(gens[2])
    assert recorder.token_ids[-len(gens[2].token_ids) :] == gens[2].token_ids
    assert sum(recorder.trainable) == sum(len(g.token_ids) for g in gens)
    assert not recorder.would_exceed(len(prompt) + len(gens[2].token_ids))  # counts the segment only


def test_would_exceed_counts_the_next_prompt_and_the_reserved_new_tokens(tokenizer: Any) -> None:
    recorder = ChatRecorder(tokenizer)
    prompt = recorder.start(opening())
    assert not recorder.would_exceed(len(prompt)) and recorder.would_exceed(len(prompt) - 1)
    assert recorder.would_exceed(len(prompt) + 63, reserve=64)
    assert not recorder.would_exceed(len(prompt) + 64, reserve=64)


def test_recorder_refuses_calls_out_of_order(tokenizer: Any) -> None:
    recorder = ChatRecorder(tokenizer)
    with pytest.raises(RecorderError, match="needs a prompt first"):
        recorder.add_model_turn(said(tokenizer, "hi"))
    recorder.start(opening())
    with pytest.raises(RecorderError, match="expected add_model_turn"):
        recorder.add_messages([{"role": "user", "content": "again"}])
    with pytest.raises(RecorderError, match="2 token ids but 1 logprobs"):
        recorder.add_model_turn(
            Generation(token_ids=[5, 2], logprobs=[-1.0], version=0, finish_reason="stop")
        )
    recorder.add_model_turn(said(tokenizer, "hi"))
    with pytest.raises(RecorderError, match="needs a prompt first"):
        recorder.add_model_turn(said(tokenizer, "hi again"))
    with pytest.raises(RecorderError, match="start\\(\\) called twice"):
        recorder.start(opening())


def test_recorded_fields_build_a_trajectory(tokenizer: Any) -> None:
    recorder, gens = record_tool_episode(tokenizer)
    trajectory = Trajectory(task_id="t", group_id="g", **recorder.trajectory_fields())
    assert trajectory.num_generated_tokens == sum(len(g.token_ids) for g in gens)
    assert trajectory.token_ids == recorder.token_ids and trajectory.segment_starts == [0]
