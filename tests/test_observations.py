"""Observation rules (paper 002, Eqs. 1-2): worked examples, idempotence, JSON logs and exact replay.

Observations are built with ``policies.chat.format_tool_result``, so their content is
``"<tool_response>\\n" + body + "\\n</tool_response>"`` and an error body opens with
``"error (<kind>): "``. Placeholder texts are pinned in full: they are what the model reads.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest

from policies.chat import format_tool_call, format_tool_result
from policies.observations import (
    Replacement,
    RuleRecord,
    apply_rule,
    replay,
    rewritten_steps,
)
from policies.types import ToolCall, ToolResult
from specs.observation_rule import ObservationRule

SYSTEM = {"role": "system", "content": "You are a helpful assistant. " + "s" * 3000}
USER = {"role": "user", "content": "Set A1 to 100. " + "u" * 3000}
HEAD = [SYSTEM, USER]


def obs(text: str, *, error_kind: str | None = None, role: str = "tool") -> dict[str, Any]:
    result = ToolResult(text=text, is_error=error_kind is not None, error_kind=error_kind)
    return format_tool_result(result, role=role)


def call(i: int) -> dict[str, Any]:
    text = f"step {i}\n" + format_tool_call(ToolCall(name="calc__set", arguments={"i": i}))
    return {"role": "assistant", "content": text}


def wrapped(body: str) -> str:
    return f"<tool_response>\n{body}\n</tool_response>"


def three_costly() -> list[dict[str, Any]]:
    # Observations at indices 3, 5, 7 with bodies of 200, 300, 400 chars: all costly at 100.
    return HEAD + [call(1), obs("a" * 200), call(2), obs("b" * 300), call(3), obs("c" * 400)]


def test_default_rule_changes_nothing() -> None:
    messages = three_costly()
    context, record = apply_rule(messages, ObservationRule(), step=3)
    assert context == messages
    assert record == RuleRecord(step=3, n_messages=8)


def test_k2_with_three_costly_observations_replaces_the_oldest() -> None:
    context, record = apply_rule(
        three_costly(), ObservationRule(keep_last_costly=2, costly_chars=100), step=3
    )
    # costly = [3, 5, 7]; all but the last 2 -> [3]; its body "a"*200 has 200 chars.
    assert context[3] == {
        "role": "tool",
        "content": wrapped("[observation omitted] (200 chars; beyond the last 2 costly)"),
    }
    assert context[:3] + context[4:] == three_costly()[:3] + three_costly()[4:]
    assert [(r.index, r.reason) for r in record.replaced] == [(3, "window")]


def test_k1_with_three_costly_observations_keeps_only_the_newest() -> None:
    context, record = apply_rule(
        three_costly(), ObservationRule(keep_last_costly=1, costly_chars=100), step=3
    )
    # costly = [3, 5, 7]; all but the last 1 -> [3, 5] (200 and 300 chars); 7 stays in full.
    assert context[3]["content"] == wrapped("[observation omitted] (200 chars; beyond the last 1 costly)")
    assert context[5]["content"] == wrapped("[observation omitted] (300 chars; beyond the last 1 costly)")
    assert context[7] == obs("c" * 400)
    assert [r.index for r in record.replaced] == [3, 5]


def test_k_at_least_the_number_of_costly_observations_keeps_all() -> None:
    messages = three_costly()
    assert apply_rule(messages, ObservationRule(keep_last_costly=3, costly_chars=100), step=3)[0] == messages
    single = HEAD + [call(1), obs("a" * 200)]
    assert apply_rule(single, ObservationRule(keep_last_costly=1, costly_chars=100), step=2)[0] == single


def test_cheap_observations_persist_and_the_threshold_is_strict() -> None:
    # Bodies of exactly 100 chars are not costly (> costly_chars): nothing is windowed.
    messages = HEAD + [call(1), obs("a" * 100), call(2), obs("b" * 100)]
    assert apply_rule(messages, ObservationRule(keep_last_costly=1, costly_chars=100), step=2)[0] == messages
    # A cheap one between two costly ones stays; only the older costly one goes.
    mixed = HEAD + [call(1), obs("a" * 101), call(2), obs("short"), call(3), obs("c" * 101)]
    _, record = apply_rule(mixed, ObservationRule(keep_last_costly=1, costly_chars=100), step=3)
    assert [r.index for r in record.replaced] == [3]


def test_an_attached_image_makes_a_short_observation_costly() -> None:
    # Body "chart:\n[image 1: image/png, attached]" = 6 + 1 + 30 = 37 chars, one image.
    image_obs = obs("chart:\n[image 1: image/png, attached]")
    messages = HEAD + [call(1), image_obs, call(2), obs("x" * 200)]
    context, _ = apply_rule(messages, ObservationRule(keep_last_costly=1, costly_chars=100), step=2)
    assert context[3]["content"] == wrapped(
        "[observation omitted] (37 chars, 1 image; beyond the last 1 costly)"
    )
    # An image the gateway did not keep is only a text note: not an image, not costly here.
    noted = HEAD + [
        call(1),
        obs("[image content, image/png, ~100 bytes, not shown]"),
        call(2),
        obs("x" * 200),
    ]
    assert apply_rule(noted, ObservationRule(keep_last_costly=1, costly_chars=100), step=2)[0] == noted


def test_image_content_parts_count_as_images() -> None:
    parts = [
        {"type": "text", "text": "<tool_response>\nplot"},
        {"type": "image"},
        {"type": "text", "text": "\n</tool_response>"},
    ]
    messages = HEAD + [call(1), {"role": "tool", "content": parts}, call(2), obs("x" * 200)]
    context, _ = apply_rule(messages, ObservationRule(keep_last_costly=1, costly_chars=100), step=2)
    # Body "plot" = 4 chars, 1 image part; list content stays a list of parts.
    note = wrapped("[observation omitted] (4 chars, 1 image; beyond the last 1 costly)")
    assert context[3]["content"] == [{"type": "text", "text": note}]
    dropped, _ = apply_rule(messages[:4], ObservationRule(placeholder_after_success=True), step=2)
    assert dropped[3]["content"] == [
        parts[0],
        {"type": "text", "text": "[observation omitted] (image part 1; the call succeeded)"},
        parts[2],
    ]


def test_placeholder_after_success_replaces_the_frame_and_keeps_the_result_text() -> None:
    messages = HEAD + [call(1), obs("cell A1 = 100\n[image 1: image/png, attached]")]
    on, record = apply_rule(messages, ObservationRule(placeholder_after_success=True), step=2)
    assert on[3] == {
        "role": "tool",
        "content": wrapped("cell A1 = 100\n[observation omitted] (image 1: image/png; the call succeeded)"),
    }
    assert [(r.index, r.reason) for r in record.replaced] == [(3, "success")]
    off, record = apply_rule(messages, ObservationRule(placeholder_after_success=False), step=2)
    assert off == messages and record.replaced == ()


def test_success_rule_leaves_text_only_results_alone() -> None:
    # Eq. 2 drops o_i and keeps rho(r_i): a text-only result is r_i itself.
    messages = HEAD + [call(1), obs("x" * 5000)]
    assert apply_rule(messages, ObservationRule(placeholder_after_success=True), step=2)[0] == messages


@pytest.mark.parametrize("kind", ["tool_error", "timeout", "parse_error", "bad_arguments"])
def test_errors_are_never_replaced_by_the_success_rule(kind: str) -> None:
    messages = HEAD + [call(1), obs("failed\n[image 1: image/png, attached]", error_kind=kind)]
    context, record = apply_rule(messages, ObservationRule(placeholder_after_success=True), step=2)
    assert context == messages and record.replaced == ()


def test_errors_are_windowed_like_any_costly_observation() -> None:
    # Body "error (timeout): " + 150 x = 17 + 150 = 167 chars.
    messages = HEAD + [call(1), obs("x" * 150, error_kind="timeout"), call(2), obs("y" * 150)]
    context, _ = apply_rule(messages, ObservationRule(keep_last_costly=1, costly_chars=100), step=2)
    assert context[3]["content"] == wrapped(
        "[observation omitted] (167 chars, an error; beyond the last 1 costly)"
    )


def test_a_success_dropped_frame_still_holds_a_window_slot() -> None:
    # 3 = success with image (costly), 5 = long text (costly); k = 2 keeps both slots, so 3 is
    # only success-dropped; k = 1 windows 3 whatever the success rule says.
    messages = HEAD + [call(1), obs("ok\n[image 1: image/png, attached]"), call(2), obs("z" * 200)]
    both = ObservationRule(keep_last_costly=2, costly_chars=100, placeholder_after_success=True)
    _, record = apply_rule(messages, both, step=2)
    assert [(r.index, r.reason) for r in record.replaced] == [(3, "success")]
    one = msgspec.structs.replace(both, keep_last_costly=1)
    _, record = apply_rule(messages, one, step=2)
    assert [(r.index, r.reason) for r in record.replaced] == [(3, "window")]


def test_system_user_and_assistant_messages_are_never_touched() -> None:
    long_call = {"role": "assistant", "content": "t" * 5000}
    messages = [SYSTEM, USER, long_call, obs("a" * 200, role="user"), long_call, obs("b" * 200)]
    rule = ObservationRule(keep_last_costly=1, costly_chars=100, placeholder_after_success=True)
    context, record = apply_rule(messages, rule, step=3)
    # Only the <tool_response> user message (format_tool_result(role="user")) is an observation.
    assert [r.index for r in record.replaced] == [3]
    assert context[3] == {
        "role": "user",
        "content": wrapped("[observation omitted] (200 chars; beyond the last 1 costly)"),
    }
    assert [context[i] for i in (0, 1, 2, 4, 5)] == [messages[i] for i in (0, 1, 2, 4, 5)]


def test_apply_rule_does_not_modify_its_input() -> None:
    messages = three_costly()
    before = copy.deepcopy(messages)
    context, _ = apply_rule(messages, ObservationRule(keep_last_costly=1, costly_chars=100), step=3)
    context[7]["content"] = "edited"
    assert messages == before


def test_empty_history() -> None:
    assert apply_rule([], ObservationRule(keep_last_costly=1), step=0) == (
        [],
        RuleRecord(step=0, n_messages=0),
    )


def test_applying_the_rule_twice_changes_nothing_more() -> None:
    rule = ObservationRule(keep_last_costly=1, costly_chars=100, placeholder_after_success=True)
    for messages in (three_costly(), episode()[:10]):
        once, _ = apply_rule(messages, rule, step=5)
        twice, record = apply_rule(once, rule, step=5)
        assert twice == once and record.replaced == ()


def test_observation_content_must_be_text_or_parts() -> None:
    with pytest.raises(
        ValueError, match=r"messages\[2\] is a tool observation with content of type NoneType"
    ):
        apply_rule(HEAD + [{"role": "tool", "content": None}], ObservationRule(), step=1)


# -- rule and record as data -------------------------------------------------------------------


def test_rule_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="keep_last_costly: expected None or >= 1"):
        ObservationRule(keep_last_costly=0)
    with pytest.raises(ValueError, match="costly_chars: expected >= 0"):
        ObservationRule(costly_chars=-1)
    with pytest.raises(ValueError, match="placeholder_text"):
        ObservationRule(placeholder_text="  ")
    with pytest.raises(msgspec.ValidationError, match="keep_last_costly"):
        msgspec.json.decode(b'{"keep_last_costly": 0}', type=ObservationRule)
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.json.decode(b'{"k": 2}', type=ObservationRule)


def test_rule_and_records_round_trip_through_json() -> None:
    rule = ObservationRule(
        keep_last_costly=2, costly_chars=10, placeholder_after_success=True, placeholder_text="[π]"
    )
    assert msgspec.json.decode(msgspec.json.encode(rule), type=ObservationRule) == rule
    full = episode()
    records = [apply_rule(full[:n], RULE, step=s)[1] for s, n in STEPS]
    parts = [
        {"type": "text", "text": "<tool_response>\nx"},
        {"type": "image"},
        {"type": "text", "text": "\n</tool_response>"},
    ]
    records.append(apply_rule(full + [call(6), {"role": "tool", "content": parts}], RULE, step=6)[1])
    decoded = msgspec.json.decode(msgspec.json.encode(records), type=list[RuleRecord])
    assert decoded == records
    assert all(
        isinstance(r.replaced, tuple) and all(isinstance(x, Replacement) for x in r.replaced) for r in decoded
    )


# -- a simulated 5-step episode ------------------------------------------------------------------

RULE = ObservationRule(keep_last_costly=1, costly_chars=100, placeholder_after_success=True)
# Step s (the agent loop's turn, from 1) is generated from the first 2 + 2 (s - 1) messages.
STEPS = [(s, 2 + 2 * (s - 1)) for s in range(1, 6)]


def episode() -> list[dict[str, Any]]:
    """system, user, then per step an assistant call and its observation; step 5 answers.

    3: long success (costly, 2000 chars); 5: short success with an image (costly);
    7: long timeout error (costly); 9: short success (cheap).
    """
    return HEAD + [
        call(1),
        obs("r" * 2000),
        call(2),
        obs("A1 = 100\n[image 1: image/png, attached]"),
        call(3),
        obs("t" * 300, error_kind="timeout"),
        call(4),
        obs("done"),
        {"role": "assistant", "content": "A1 is 100."},
    ]


def test_episode_contexts_worked_by_hand() -> None:
    full = episode()
    contexts = {s: apply_rule(full[:n], RULE, step=s)[0] for s, n in STEPS}
    window_3 = wrapped("[observation omitted] (2000 chars; beyond the last 1 costly)")
    # "A1 = 100\n[image 1: image/png, attached]" = 8 + 1 + 30 = 39 chars, 1 image.
    window_5 = wrapped("[observation omitted] (39 chars, 1 image; beyond the last 1 costly)")
    success_5 = wrapped("A1 = 100\n[observation omitted] (image 1: image/png; the call succeeded)")
    assert contexts[1] == full[:2]
    assert contexts[2] == full[:4]  # 3 is the only costly one; a text-only success stays
    assert contexts[3][3]["content"] == window_3 and contexts[3][5]["content"] == success_5
    assert contexts[4][3]["content"] == window_3 and contexts[4][5]["content"] == window_5
    assert contexts[4][7] == full[7]  # the newest costly one, an error: kept in full
    assert contexts[5] == contexts[4] + full[8:10]  # 9 is cheap: step 5 extends step 4


def test_replay_rebuilds_every_step_exactly() -> None:
    full = episode()
    records = [apply_rule(full[:n], RULE, step=s)[1] for s, n in STEPS]
    logged = msgspec.json.decode(msgspec.json.encode(records), type=list[RuleRecord])
    contexts = replay(full, logged)
    assert len(contexts) == len(STEPS)
    for (s, n), context in zip(STEPS, contexts, strict=True):
        assert context == apply_rule(full[:n], RULE, step=s)[0]


def test_window_slides_are_where_the_recorder_starts_a_new_segment() -> None:
    full = episode()
    records = [apply_rule(full[:n], RULE, step=s)[1] for s, n in STEPS]
    # Step 3: message 3 becomes a placeholder; step 4: message 5 goes from success-dropped to
    # windowed. 3 costly observations, k = 1: 1 + (3 - 1) = 3 segments, starting at steps 1, 3, 4.
    assert rewritten_steps(records) == [3, 4]
    success_only = ObservationRule(placeholder_after_success=True)
    assert rewritten_steps([apply_rule(full[:n], success_only, step=s)[1] for s, n in STEPS]) == []
    assert rewritten_steps([]) == []


def test_replay_refuses_records_that_do_not_fit_the_history() -> None:
    full = episode()
    records = [apply_rule(full[:n], RULE, step=s)[1] for s, n in STEPS]
    reduced = apply_rule(full, RULE, step=6)[0]
    with pytest.raises(ValueError, match=r"messages\[3\] differs from the one the rule saw"):
        replay(reduced, records)
    with pytest.raises(ValueError, match="expected increasing steps"):
        replay(full, [records[3], records[2]])
    with pytest.raises(ValueError, match="record of step 3 needs 6 messages, got 4"):
        replay(full[:4], records)
    shifted = RuleRecord(
        step=1, n_messages=4, replaced=(msgspec.structs.replace(records[2].replaced[0], index=2),)
    )
    with pytest.raises(ValueError, match=r"messages\[2\] is not a tool observation"):
        replay(full, [shifted])
    assert replay(full, []) == []
