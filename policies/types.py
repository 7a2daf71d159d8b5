"""Data that crosses stage boundaries: generations, tools, tool results, trajectories.

Plain msgspec Structs: they pickle through Ray, encode to JSON for the per-step JSONL, and carry
no behaviour. Every layer (actors, policies, rewards, launch) imports them from here.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec


class SamplingConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How one generation call samples; the Generator maps it onto its engine."""

    max_tokens: int = 256
    """Most new tokens in one model turn."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    stop_token_ids: tuple[int, ...] = ()
    """Token ids that end the turn (kept in the output, like eos)."""
    ignore_eos: bool = False
    """Keep sampling past eos until ``max_tokens`` (benchmarks that need equal lengths)."""


class Generation(msgspec.Struct, frozen=True, kw_only=True):
    """One model turn: exactly the tokens the engine sampled, with their logprobs."""

    token_ids: list[int]
    logprobs: list[float]
    """Log-probability of each sampled token under the policy that sampled it."""
    version: int
    """Policy version (number of learner updates applied) that produced the turn."""
    finish_reason: Literal["stop", "length"]


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A tool as the model sees it: namespaced name, description, JSON schema of its arguments."""

    name: str
    """Namespaced name the model calls, ``<server>__<tool>``."""
    server: str
    tool: str
    """The tool's own name on its MCP server."""
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=dict)
    """JSON schema of the arguments (MCP ``inputSchema``)."""
    read_only: bool | None = None
    """MCP ``readOnlyHint`` annotation, when the server gives one."""
    annotations: dict[str, Any] = msgspec.field(default_factory=dict)
    """Every MCP tool annotation the server gives (``readOnlyHint``, ``destructiveHint``,
    ``idempotentHint``, ``openWorldHint``, ``title``), as on the wire."""


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed tool call from the model's text."""

    name: str
    arguments: dict[str, Any]


class ToolResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a tool call returned, already turned into text the model can read."""

    text: str
    """The observation for a text model: text parts, placeholders for images and binary data,
    control tokens escaped, secrets redacted, capped in size."""
    is_error: bool = False
    error_kind: str | None = None
    """``None`` on success; else one of ``tool_error``, ``timeout``, ``unknown_tool``,
    ``bad_arguments``, ``parse_error``, ``server_died``, ``budget_exhausted``."""
    latency_s: float = 0.0
    output_bytes: int = 0
    """Size of the server's result as it came over the wire (before any cap)."""
    structured: Any = None
    """The result's ``structuredContent``, as the server returned it (secrets redacted)."""
    images: tuple[dict[str, str], ...] = ()
    """Images (``{"mimeType", "data"}``, base64) kept for multimodal models (gateway option)."""
    server: str | None = None
    """The MCP server that ran the call (``None``: it never reached one)."""
    read_only: bool | None = None
    """The tool's ``readOnlyHint``."""


class ToolCallRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of a trajectory's tool-call log."""

    turn: int
    name: str
    arguments: dict[str, Any]
    ok: bool
    error_kind: str | None
    latency_s: float
    output_bytes: int
    server: str | None = None
    read_only: bool | None = None


TrajectoryStatus = Literal["ok", "infra_failed", "eval_failed"]


class Trajectory(msgspec.Struct, kw_only=True):
    """A token-exact multi-turn episode, ready for the learner.

    ``token_ids`` is the whole conversation as the model saw it; ``trainable[i]`` is 1 exactly for
    tokens the policy sampled, whose rollout log-probabilities are in ``logprobs[i]`` (0.0
    elsewhere). ``segment_starts`` lists where a new rendering segment began (0 always; more when
    a chat template rewrote history and the recorder had to restart).
    """

    task_id: str
    group_id: str
    token_ids: list[int]
    trainable: list[int]
    logprobs: list[float]
    versions: list[int]
    """Policy version of each model turn, in order."""
    messages: list[dict[str, Any]]
    """The conversation as chat messages (decoded), for logs and evaluators."""
    tool_calls: list[ToolCallRecord] = msgspec.field(default_factory=list)
    segment_starts: list[int] = msgspec.field(default_factory=lambda: [0])
    reasoning: list[int] = msgspec.field(default_factory=list)
    """Thought-MDP mask: 1 for sampled tokens of an explicit reasoning span (inside ``trainable``);
    the action mask is ``trainable`` minus it. Empty when the agent does not reason explicitly."""
    final_answer: str | None = None
    """The model's last message when it ended without a tool call."""
    num_turns: int = 0
    truncated: bool = False
    """Ended by the turn or context limit rather than by a final answer."""
    status: TrajectoryStatus = "ok"
    error: str | None = None
    """Why the trajectory failed, when ``status`` is not ``ok``."""
    reward: float | None = None
    reward_details: dict[str, Any] = msgspec.field(default_factory=dict)
    observation_records: list[dict[str, Any]] = msgspec.field(default_factory=list)
    """What the observation rule did at each step (``policies.observations.RuleRecord`` as builtins),
    when one was applied: ``messages`` is then the full history and these rebuild each step's
    context from it (``policies.replay``). Empty without a rule."""

    @property
    def num_generated_tokens(self) -> int:
        return sum(self.trainable)

    @property
    def num_reasoning_tokens(self) -> int:
        return sum(self.reasoning)

    @property
    def action(self) -> list[int]:
        """Thought-MDP action mask: sampled tokens outside the reasoning spans."""
        if not self.reasoning:
            return list(self.trainable)
        return [t & (1 - r) for t, r in zip(self.trainable, self.reasoning, strict=True)]


class TrainSample(msgspec.Struct, frozen=True, kw_only=True):
    """One sequence for the learner: a trajectory reduced to what the loss needs."""

    token_ids: list[int]
    trainable: list[int]
    """1 where the token is the policy's own (the loss applies), 0 elsewhere."""
    logprobs: list[float]
    """Rollout-time log-probability of each token (0.0 where untrainable)."""
    advantage: float = 0.0
    """Sequence-level advantage, broadcast to every trainable token (to the action tokens only
    under token-masked attribution, when ``reasoning`` is given)."""
    reasoning: list[int] = msgspec.field(default_factory=list)
    """Thought-MDP reasoning mask (inside ``trainable``); empty: no explicit reasoning."""
    reasoning_advantage: float = 0.0
    """Advantage from the reasoning reward family, for the reasoning tokens."""
