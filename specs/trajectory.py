"""A finished episode as data: its tokens, its tool-call facts and its typed score.

The lowest layer that needs these types: domain evaluators (``specs/domains/*/hooks.py``) read a
``Trajectory``, ``rewards`` score its ``ToolCallRecord``s, ``policies`` build learner samples from
its ``Score``, ``actors`` produce it, ``launch`` logs it. Plain msgspec Structs: they pickle
through Ray and encode to the per-step JSONL.

One reward flow: the ``Evaluator`` actor is the only writer of ``Trajectory.score``. Everything
downstream (advantages, metrics, W&B, eval tables, curation, demonstrations) reads the ``Score``
and nothing else. A reward family that is switched off is ``None``, never 0.0.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec


class CutRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One part of a tool result that the gateway cut to its cap before it crossed an actor."""

    part: Literal["text", "structured", "image"]
    original_bytes: int
    """Size of that part as the server returned it."""
    kept_bytes: int
    """Size after the cut (0: dropped whole, a marker stands in its place)."""


class ImageRef(msgspec.Struct, frozen=True, kw_only=True):
    """An image a tool returned (an MCP ``ImageContent``), by the SHA-256 of its bytes: the bytes
    live once in ``Trajectory.images`` and, on disk, in ``images/<sha256>.<ext>`` beside the JSONL."""

    sha256: str
    mime_type: str
    size: int
    """Bytes (decoded)."""


class ImageSpan(msgspec.Struct, frozen=True, kw_only=True):
    """Where one image sits in a token stream: ``token_ids[start : start + length]`` are the tokens
    the model's processor expanded its placeholder into (never trainable); the pixels are
    ``Trajectory.images[sha256]``. A vision-language policy's recorder writes these; the generator
    and the learner feed those pixels at exactly those tokens."""

    sha256: str
    start: int
    length: int


class ToolCallRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What the gateway knew about one tool call, kept in the trajectory (rewards read these,
    never the observation text)."""

    turn: int
    """Model turn (1-based) whose output made the call."""
    name: str
    """The name the model called (namespaced ``<server>__<tool>``, or ``route``); ``""`` when
    the call did not parse."""
    arguments: dict[str, Any]
    ok: bool
    error_kind: str | None
    latency_s: float
    output_bytes: int
    server: str | None = None
    """The MCP server that ran it (``None``: it never reached one, e.g. ``route`` or a bad name)."""
    tool: str | None = None
    """The tool's own name on that server."""
    read_only: bool | None = None
    """The tool's MCP ``readOnlyHint`` (``None``: the server did not say)."""
    route_hits: tuple[str, ...] | None = None
    """For a ``route`` call: the namespaced tools it returned, best first; ``None`` otherwise."""
    cuts: tuple[CutRecord, ...] = ()
    """What the gateway cut from the result (text, structured content, images)."""
    returned: dict[str, Any] | None = None
    """The result in MCP's shape, ``{"content": [{"type": "text", "text": ...}],
    "structuredContent": ..., "isError": ...}`` (the observation's text, as bounded and redacted):
    what a task's per-call cleanups read as ``$return`` (``specs.cleanup_calls``)."""
    images: tuple[ImageRef, ...] = ()
    """The images the result carried (the gateway keeps them with ``rollout.keep_images``), in order."""


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """One evaluator's verdict on an episode."""

    func: str
    op: str
    passed: bool
    message: str = ""
    """Why it failed (or what it saw), in the evaluator's words."""


class AdoptionScore(msgspec.Struct, frozen=True, kw_only=True):
    """The tool-adoption reward family (paper 002, Eqs. 3-4) of one trajectory."""

    shaped_return: float
    """``R(tau) = succ - lambda_len T / T_max - lambda_cap [T >= T_max]``."""
    steps: int
    """``T``, the trajectory's model turns (at least 1)."""
    step_bonus: tuple[float, ...]
    """``lambda_mcp * b_t`` for steps ``t = 1..T``: added after group normalisation."""


class Score(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the Evaluator says about one episode; the only source of rewards downstream."""

    verdicts: tuple[Verdict, ...]
    success: bool
    """The task succeeded: every evaluator passed. The one definition of success."""
    task: float
    """The task reward the outcome family trains on: 1.0 on success, else 0.0; an episode cut by a
    limit gets ``algorithm.truncated_reward`` when that is set."""
    tool: float | None = None
    """MCPDisCo's R_tool (eqs. 5-8) when ``algorithm.tool_reward`` is on."""
    reasoning: float | None = None
    """MCPDisCo's R_reasoning (eqs. 1-4) when ``algorithm.reasoning_reward`` is on."""
    adoption: AdoptionScore | None = None
    """Paper 002's shaped return and tool bonus when ``algorithm.returns`` is ``adoption``."""

    @classmethod
    def of(cls, verdicts: tuple[Verdict, ...], **families: Any) -> Score:
        """A score whose success and task reward follow from the verdicts (all must pass)."""
        success = bool(verdicts) and all(v.passed for v in verdicts)
        return cls(verdicts=verdicts, success=success, task=1.0 if success else 0.0, **families)


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
    score: Score | None = None
    """The Evaluator's score; ``None`` until it ran (and for a lost trajectory)."""
    observation_records: list[dict[str, Any]] = msgspec.field(default_factory=list)
    """What the observation rule did at each step (``policies.observations.RuleRecord`` as builtins),
    when one was applied: ``messages`` is then the full history and these rebuild each step's
    context from it (``policies.replay``). Empty without a rule."""
    images: dict[str, str] = msgspec.field(default_factory=dict)
    """The tool results' images by SHA-256 (``ImageRef``), base64, each once however often it was
    returned; written beside the trajectories, never inlined in their JSONL (``launch.report``)."""
    image_spans: list[ImageSpan] = msgspec.field(default_factory=list)
    """For a vision-language policy: each image the model saw, where its tokens are, in token
    order (an image seen in two rendering segments appears twice). Empty for a text policy."""

    @property
    def succeeded(self) -> bool:
        """Scored, and the task succeeded (``Score.success``)."""
        return self.score is not None and self.score.success

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
