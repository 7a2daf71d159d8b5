"""The ReAct loop on the real SmolLM2 tokenizer, with a scripted engine and an in-memory tool caller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from transformers import AutoTokenizer

from policies.react import EpisodeLimits, build_messages, run_episode
from policies.scripted import ScriptedEngine
from policies.tokens import ChatRecorder
from policies.types import SamplingConfig, ToolResult, ToolSpec

pytestmark = pytest.mark.anyio

CALC = ToolSpec(
    name="calculator__calculate",
    server="calculator",
    tool="calculate",
    description="Evaluate",
    parameters={"type": "object", "properties": {"expression": {"type": "string"}}},
)
CALL = '<tool_call>{"name": "calculator__calculate", "arguments": {"expression": "17*25-38"}}</tool_call>'


class Task(msgspec.Struct):
    instance_id: str = "t1"


class InMemoryTools:
    """Implements the ToolCaller protocol: a calculator that knows one answer, or a dead server."""

    def __init__(self, dead: bool = False) -> None:
        self.dead = dead
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def call(self, env_id: str, name: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        self.calls.append((name, arguments))
        if self.dead:
            return ToolResult(text="server exited", is_error=True, error_kind="server_died")
        if name != CALC.name:
            return ToolResult(text=f"unknown tool {name}", is_error=True, error_kind="unknown_tool")
        return ToolResult(text="387", latency_s=0.001)


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Any:
    return AutoTokenizer.from_pretrained(model_dir)


def scripted(tokenizer: Any, *turns: str) -> ScriptedEngine:
    script = iter(turns)
    return ScriptedEngine(tokenizer, lambda task, conversation: next(script), Task())


async def episode(tokenizer: Any, engine: ScriptedEngine, tools: InMemoryTools, **limits: Any) -> Any:
    with anyio.fail_after(30):
        return await run_episode(
            task_id="t1",
            group_id="g1",
            messages=build_messages("How many pens are left?", [CALC], None),
            recorder=ChatRecorder(tokenizer),
            engine=engine,
            tools=tools,
            env_id="e1",
            sampling=SamplingConfig(temperature=0.0),
            limits=EpisodeLimits(**limits),
        )


async def test_an_expert_episode_calls_the_tool_then_answers_with_its_result(tokenizer: Any) -> None:
    tools = InMemoryTools()
    t = await episode(tokenizer, scripted(tokenizer, CALL, "The answer is 387."), tools)
    assert tools.calls == [("calculator__calculate", {"expression": "17*25-38"})]
    assert t.status == "ok" and not t.truncated and t.num_turns == 2
    assert t.final_answer == "The answer is 387."
    assert [c.ok for c in t.tool_calls] == [True]
    assert "<tool_response>" in tokenizer.decode(t.token_ids) and "387" in t.messages[-2]["content"]
    trained = tokenizer.decode([i for i, m in zip(t.token_ids, t.trainable, strict=True) if m])
    assert trained == CALL + "<|im_end|>" + "The answer is 387." + "<|im_end|>"
    assert (
        list(tokenizer.apply_chat_template(t.messages, tokenize=True, return_dict=False))[: len(t.token_ids)]
        == t.token_ids
    )


async def test_a_malformed_call_becomes_an_observation_and_the_episode_goes_on(tokenizer: Any) -> None:
    tools = InMemoryTools()
    t = await episode(tokenizer, scripted(tokenizer, "<tool_call>{not json</tool_call>", CALL, "387"), tools)
    assert [c.error_kind for c in t.tool_calls] == ["parse_error", None]
    assert "not valid JSON" in t.messages[3]["content"]
    assert t.final_answer == "387" and t.status == "ok"


async def test_the_turn_limit_truncates_without_a_final_answer(tokenizer: Any) -> None:
    t = await episode(tokenizer, scripted(tokenizer, CALL, CALL), InMemoryTools(), max_turns=2)
    assert t.truncated and t.final_answer is None and t.num_turns == 2 and len(t.tool_calls) == 2


async def test_a_dead_server_ends_the_episode_as_an_infrastructure_failure(tokenizer: Any) -> None:
    t = await episode(tokenizer, scripted(tokenizer, CALL, "unused"), InMemoryTools(dead=True))
    assert t.status == "infra_failed" and "server exited" in (t.error or "") and t.num_turns == 1


async def test_the_context_budget_caps_each_turn(tokenizer: Any) -> None:
    t = await episode(tokenizer, scripted(tokenizer, "word " * 200), InMemoryTools(), max_new_tokens=16)
    assert sum(t.trainable) == 16 and t.truncated and t.final_answer is None


async def test_a_prompt_over_the_context_budget_says_so_on_the_trajectory(tokenizer: Any) -> None:
    t = await episode(tokenizer, scripted(tokenizer, "unused"), InMemoryTools(), max_context_tokens=64)
    assert t.status == "ok" and t.truncated and t.num_turns == 0
    assert t.error is not None and "max_context_tokens is 64: raise rollout.max_context_tokens" in t.error
