"""Data the agent loop exchanges with its engine, its tools and its learner: generations, tools,
tool results, learner samples.

Plain msgspec Structs: they pickle through Ray and carry no behaviour. The finished episode
(``Trajectory``, its tool-call records and its score) is lower down, in ``specs.trajectory``, where
domain evaluators and rewards can read it.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from specs.trajectory import CutRecord, ImageSpan


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


class PromptImage(msgspec.Struct, frozen=True, kw_only=True):
    """One image of a prompt for a vision-language engine: ``prompt_ids[start : start + length]``
    are its expanded tokens (as the model's processor writes them), ``placeholder`` the tokens the
    processor expands (what the engine's own processor expects in their place), ``data`` the encoded
    image (PNG, JPEG)."""

    data: bytes
    start: int
    length: int
    placeholder: tuple[int, ...]


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
    tool: str | None = None
    """The tool's own name on that server."""
    read_only: bool | None = None
    """The tool's ``readOnlyHint``."""
    route_hits: tuple[str, ...] | None = None
    """For the gateway's ``route`` tool: the namespaced tools it returned, best first."""
    cuts: tuple[CutRecord, ...] = ()
    """What the gateway cut to its caps (text, structured content, images) before returning."""


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
    token_advantages: list[float] = msgspec.field(default_factory=list)
    """Per-token advantages in place of ``advantage`` (empty: ``advantage`` everywhere): one row
    that carries several steps of a trajectory, each with its own (``adoption_samples(pack=True)``)."""
    sequences: list[int] = msgspec.field(default_factory=list)
    """Per token, which of the row's sequences it belongs to (0, 1, ...: the steps of a packed
    row), each weighed as a row of its own by the seq-mean losses; empty: one sequence."""
    reasoning: list[int] = msgspec.field(default_factory=list)
    """Thought-MDP reasoning mask (inside ``trainable``); empty: no explicit reasoning."""
    reasoning_advantage: float = 0.0
    """Advantage from the reasoning reward family, for the reasoning tokens."""
    images: list[ImageSpan] = msgspec.field(default_factory=list)
    """A vision-language policy's images in this row, ``start`` relative to it, in token order."""
    image_data: dict[str, str] = msgspec.field(default_factory=dict)
    """Their pixels, base64 by SHA-256 (``Trajectory.images``): the learner feeds these at ``images``."""
