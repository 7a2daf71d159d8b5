"""Observation rules in the agent loop, and their replay: the rebuilt context equals the rollout's
token for token (paper 002, §5.3: the rule must be shared by rollout, training and evaluation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from transformers import AutoTokenizer

from actors.groups import Group
from launch.steps import drop_unreplayable
from policies.observations import apply_rule
from policies.react import EpisodeLimits, build_messages, run_episode
from policies.replay import check_replay, rebuild, turn_tokens
from policies.scripted import ScriptedEngine
from policies.tokens import ChatRecorder
from policies.types import SamplingConfig, ToolResult, ToolSpec
from specs.observation_rule import ObservationRule
from specs.trajectory import Trajectory

pytestmark = pytest.mark.anyio

PAGE = ToolSpec(
    name="web__page",
    server="web",
    tool="page",
    description="Fetch a page",
    parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
)


def call(n: int) -> str:
    return f'<tool_call>{{"name": "web__page", "arguments": {{"n": {n}}}}}</tool_call>'


class Pages:
    """A ToolCaller whose results are long (costly) pages, or an error for page 0."""

    async def call(self, env_id: str, name: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        n = arguments["n"]
        if n == 0:
            return ToolResult(text="no page 0", is_error=True, error_kind="tool_error")
        return ToolResult(text=f"page {n}: " + "lorem ipsum " * 20)


class Task(msgspec.Struct):
    instance_id: str = "t1"


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Any:
    return AutoTokenizer.from_pretrained(model_dir)


async def episode(
    tokenizer: Any, turns: list[str], rule: ObservationRule | None, max_turns: int = 6
) -> Trajectory:
    script = iter(turns)
    with anyio.fail_after(60):
        return await run_episode(
            task_id="t1",
            group_id="g1",
            messages=build_messages("Read pages 1 to 4 and summarise.", [PAGE], None),
            recorder=ChatRecorder(tokenizer),
            engine=ScriptedEngine(tokenizer, lambda task, conversation: next(script), Task()),
            tools=Pages(),
            env_id="e1",
            sampling=SamplingConfig(temperature=0.0),
            limits=EpisodeLimits(max_turns=max_turns, max_new_tokens=64, max_context_tokens=4096),
            observation_rule=rule,
        )


WINDOW = ObservationRule(keep_last_costly=2, costly_chars=100)
TURNS = [call(1), call(2), call(0), call(3), call(4), "The pages are about lorem ipsum."]


async def test_the_window_rule_shows_the_model_its_reduced_context_and_logs_each_step(tokenizer: Any) -> None:
    t = await episode(tokenizer, TURNS, WINDOW)
    assert t.status == "ok" and t.final_answer == "The pages are about lorem ipsum."
    # The full history stays in the trajectory; one record per observation step (turns 1-5).
    assert [m["role"] for m in t.messages].count("tool") == 5
    assert [r["step"] for r in t.observation_records] == [1, 2, 3, 4, 5]
    # 4 costly pages (the error is short), k = 2: pages 1 and 2 are windowed by the end.
    last = t.observation_records[-1]
    assert sorted(r["reason"] for r in last["replaced"]) == ["window", "window"]
    # Each window slide rewrites history: a new segment (1 + max(0, C - k) = 3 segments).
    assert len(t.segment_starts) == 3
    # The model's last prompt is exactly the rule's context, re-rendered.
    context, _ = apply_rule(t.messages, WINDOW, step=5)
    rendered = tokenizer.apply_chat_template(context[:-1], tokenize=False, add_generation_prompt=False)
    last_segment = tokenizer.decode(t.token_ids[t.segment_starts[-1] :], skip_special_tokens=False)
    assert last_segment.startswith(rendered.rsplit("<|im_start|>assistant", 1)[0])
    assert "page 1: lorem" not in last_segment and "page 4: lorem" in last_segment


async def test_replay_rebuilds_the_rollout_token_for_token(tokenizer: Any) -> None:
    for rule in (WINDOW, ObservationRule(), None):
        t = await episode(tokenizer, TURNS, rule)
        rebuilt = rebuild(t, ChatRecorder(tokenizer)).trajectory_fields()
        assert rebuilt["token_ids"] == t.token_ids
        assert rebuilt["trainable"] == t.trainable
        assert rebuilt["segment_starts"] == t.segment_starts
        assert rebuilt["logprobs"] == t.logprobs
        assert check_replay(t, lambda: ChatRecorder(tokenizer)) is None


async def test_a_log_that_does_not_fit_the_tokens_is_refused_with_where(tokenizer: Any) -> None:
    t = await episode(tokenizer, TURNS, WINDOW)
    edited = msgspec.structs.replace(t, messages=[dict(m) for m in t.messages])
    first_tool = next(i for i, m in enumerate(edited.messages) if m["role"] == "tool")
    edited.messages[first_tool]["content"] = "something else"
    problem = check_replay(edited, lambda: ChatRecorder(tokenizer))
    assert problem is not None and "differs from the one the rule saw" in problem
    # Another rule than the one logged: the records still say what was done, so tokens match;
    # but tokens from another episode do not.
    other = await episode(tokenizer, [call(1), call(3), "Done."], WINDOW)
    swapped = msgspec.structs.replace(t, token_ids=other.token_ids, trainable=other.trainable)
    assert check_replay(swapped, lambda: ChatRecorder(tokenizer)) is not None


async def test_unreplayable_groups_are_dropped_whole_and_counted(tokenizer: Any) -> None:
    good = await episode(tokenizer, TURNS, WINDOW)
    bad = msgspec.structs.replace(good, messages=[dict(m) for m in good.messages])
    bad.messages[2] = {**bad.messages[2], "content": "tampered"}
    groups = [
        Group(task_id="t1", group_id="a", trajectories=[good, good]),
        Group(task_id="t1", group_id="b", trajectories=[good, bad]),
    ]
    assert drop_unreplayable(groups, lambda: ChatRecorder(tokenizer)) == 1
    assert [g.dropped for g in groups] == [None, "replay_mismatch"]


def test_turn_tokens_split_runs_at_segment_starts() -> None:
    t = Trajectory(
        task_id="t",
        group_id="g",
        token_ids=list(range(9)),
        trainable=[0, 1, 1, 0, 0, 1, 1, 1, 0],
        logprobs=[0.0] * 9,
        versions=[0, 0, 0],
        messages=[],
        segment_starts=[0, 6],
    )
    assert turn_tokens(t) == [(1, 3), (5, 6), (6, 8)]
