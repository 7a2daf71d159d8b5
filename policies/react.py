"""ReAct-style agent loop for chat models: generate, parse a tool call, call it, repeat.

One episode = one trajectory. The loop is pure orchestration over two protocols, an ``Engine``
(token ids in, token ids + logprobs out) and a ``ToolCaller`` (the gateway), and a ``ChatRecorder``
that keeps the conversation token-exact. A bad model output is data, not a crash: a malformed
call becomes an error observation and the episode goes on. Only an environment or server death
ends the episode as ``infra_failed`` (the pool then destroys the environment).

With an observation rule (``policies.observations``, paper 002 Eqs. 1-2) the loop keeps the full
history and shows the model ``apply_rule(history)`` at every step; each step's ``RuleRecord`` goes
into the trajectory, so the learner and ``launch/eval.py`` rebuild exactly the contexts the model
saw (``policies.replay``).

Images: a tool's images are kept by SHA-256 in the recorder's ``images`` (and so in the
trajectory), whatever the policy. A vision-language policy (``recorder.vision``) also sees them:
its tool messages carry image parts, and every turn's prompt goes to the engine with the images
it holds (``ChatRecorder.prompt_images``).
"""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import Sequence
from typing import Any, Protocol

import msgspec

from policies.chat import format_tool_result, render_system_prompt
from policies.engine import Engine
from policies.observations import apply_rule
from policies.tokens import ChatRecorder
from policies.tool_calls import ToolCallParseError, parse_tool_call
from policies.types import SamplingConfig, ToolResult, ToolSpec
from specs.observation_rule import ObservationRule
from specs.trajectory import ImageRef, ToolCallRecord, Trajectory

logger = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant that solves tasks with the tools provided."
INFRA_ERRORS = frozenset({"server_died"})


class ToolCaller(Protocol):
    async def call(
        self, env_id: str, name: str, arguments: dict[str, Any], timeout_s: float
    ) -> ToolResult: ...


class EpisodeLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Bounds of one episode."""

    max_turns: int = 3
    """Model turns before the episode is cut (truncated)."""
    max_new_tokens: int = 96
    """Most tokens in one model turn."""
    max_context_tokens: int = 1024
    """Whole-conversation budget; a turn never generates past it."""
    tool_timeout_s: float = 10.0
    """Deadline of each tool call."""


def build_messages(
    instruction: str, tools: Sequence[ToolSpec], system_prompt: str | None
) -> list[dict[str, Any]]:
    """The opening conversation: a system prompt that lists the tools, then the task."""
    system = render_system_prompt(system_prompt or DEFAULT_SYSTEM_PROMPT, list(tools))
    return [{"role": "system", "content": system}, {"role": "user", "content": instruction}]


async def run_episode(
    *,
    task_id: str,
    group_id: str,
    messages: list[dict[str, Any]],
    recorder: ChatRecorder,
    engine: Engine,
    tools: ToolCaller,
    env_id: str,
    sampling: SamplingConfig,
    limits: EpisodeLimits,
    observation_rule: ObservationRule | None = None,
) -> Trajectory:
    """Run one episode to a final answer, the turn limit or the context limit. ``observation_rule``:
    what of past tool observations the model sees (``None``: everything)."""
    ids = recorder.start(messages)
    history = [dict(m) for m in messages]  # the full conversation, whatever the rule hides
    records: list[dict[str, Any]] = []
    calls: list[ToolCallRecord] = []
    final_answer: str | None = None
    status: str = "ok"
    error: str | None = None
    turns = 0
    while turns < limits.max_turns:
        budget = min(limits.max_new_tokens, limits.max_context_tokens - len(ids))
        if budget <= 0:
            if turns == 0:  # a config problem, not the policy's: say so on the trajectory
                error = (
                    f"the prompt alone is {len(ids)} tokens, max_context_tokens is "
                    f"{limits.max_context_tokens}: raise rollout.max_context_tokens (and generator.max_model_len)"
                )
            break
        generation = await engine.generate(
            ids, msgspec.structs.replace(sampling, max_tokens=budget), recorder.prompt_images()
        )
        turns += 1
        text = recorder.add_model_turn(generation)
        history.append({"role": "assistant", "content": text})
        parsed = parse_tool_call(text)
        if parsed is None:
            if generation.finish_reason == "stop":
                final_answer = text
            break
        result = await _execute(parsed, tools, env_id, limits.tool_timeout_s)
        calls.append(_record(turns, parsed, result, recorder.images))
        if result.error_kind in INFRA_ERRORS:
            status, error = "infra_failed", f"turn {turns}: {result.text}"
            break
        if turns < limits.max_turns:
            seen = calls[-1].images if recorder.vision is not None else ()
            history.append(format_tool_result(result, images=seen))
            if observation_rule is None:
                ids = recorder.add_messages(history[-1:])
            else:
                context, record = apply_rule(history, observation_rule, step=turns)
                records.append(msgspec.to_builtins(record))
                ids = recorder.set_context(context)
    fields = recorder.trajectory_fields()
    if observation_rule is not None:
        fields["messages"] = history
    return Trajectory(
        task_id=task_id,
        group_id=group_id,
        **fields,
        observation_records=records,
        tool_calls=calls,
        final_answer=final_answer,
        num_turns=turns,
        truncated=final_answer is None and status == "ok",
        status=status,  # type: ignore[arg-type]
        error=error,
    )


async def _execute(parsed: Any, tools: ToolCaller, env_id: str, timeout_s: float) -> ToolResult:
    if isinstance(parsed, ToolCallParseError):
        return parsed.as_result()
    return await tools.call(env_id, parsed.name, parsed.arguments, timeout_s)


def _record(turn: int, parsed: Any, result: ToolResult, images: dict[str, str]) -> ToolCallRecord:
    """The call's record; its images go into ``images`` (by SHA-256) and the record keeps their refs."""
    refs = tuple(image_ref(image, images) for image in result.images)
    name, arguments = ("", {}) if isinstance(parsed, ToolCallParseError) else (parsed.name, parsed.arguments)
    return ToolCallRecord(
        turn=turn,
        name=name,
        arguments=arguments,
        ok=not result.is_error,
        error_kind=result.error_kind,
        latency_s=result.latency_s,
        output_bytes=result.output_bytes or len(result.text.encode()),
        server=result.server,
        tool=result.tool,
        read_only=result.read_only,
        route_hits=result.route_hits,
        cuts=result.cuts,
        returned={
            "content": [{"type": "text", "text": result.text}],
            "structuredContent": result.structured,
            "isError": result.is_error,
        },
        images=refs,
    )


def image_ref(image: dict[str, str], store: dict[str, str]) -> ImageRef:
    """The ref of one MCP image (``{"mimeType", "data"}``, base64), its data put in ``store`` once."""
    raw = base64.b64decode(image["data"])
    digest = hashlib.sha256(raw).hexdigest()
    store.setdefault(digest, image["data"])
    return ImageRef(sha256=digest, mime_type=image["mimeType"], size=len(raw))
