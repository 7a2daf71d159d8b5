"""Thought-MDP turns: where a model turn's explicit reasoning is, as characters and as tokens.

In the Thought-MDP of MCPDisCo (paper 000, §3.1) every external action — Route (the gateway's
``route`` tool), Execute (a tool call with JSON arguments) or Terminate (a final answer) — is
preceded by a reasoning span ``t_i``. Token-masked attribution (§3.3.2, eq. 10) needs two disjoint
masks over the generated tokens: ``m^R`` selects the reasoning spans, ``m^T`` the action tokens
(calls, JSON arguments, final-answer tokens). Two formats are read:

- ``think``: the turn opens with ``<think> ... </think>`` (Qwen3 and our system prompt's
  convention); the span includes both tags. A turn whose ``<think>`` is never closed (cut by the
  token limit) is reasoning to its end. Where the chat template already opened ``<think>`` in the
  prompt (DeepSeek-R1 style), the turn's text up to its lone ``</think>`` is the reasoning. Text
  outside the span is action.
- ``harmony`` (gpt-oss, OpenAI Harmony): every message on the ``analysis`` channel is reasoning,
  from its ``<|channel|>`` header to its ``<|end|>``; ``commentary`` (tool calls, preambles) and
  ``final`` messages are action.

``reasoning_spans(text, fmt)`` gives character spans; ``reasoning_mask(ids, decode, spans)`` turns
them into a per-token mask: a token is reasoning when its first character lies inside a span (a
token that straddles a boundary goes to the side it starts on). Token starts come from decoding
prefixes, found by binary search, so a turn of n tokens costs O(log n) decodes per boundary.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal

ReasoningFormat = Literal["none", "think", "harmony"]
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
THINK_INSTRUCTIONS = (
    "Before every action, reason step by step inside <think></think>. Then act: call one tool, or "
    "give the final answer."
)
_HARMONY_ANALYSIS = re.compile(r"<\|channel\|>analysis.*?(?:<\|end\|>|$)", re.DOTALL)


def reasoning_spans(text: str, fmt: ReasoningFormat) -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of the turn's explicit reasoning, in order."""
    if fmt == "none":
        return []
    if fmt == "think":
        start = text.find(THINK_OPEN)
        if start == -1:  # the template opened <think> in the prompt (R1 style): up to a lone </think>
            close = text.find(THINK_CLOSE)
            return [(0, close + len(THINK_CLOSE))] if close != -1 else []
        close = text.find(THINK_CLOSE, start + len(THINK_OPEN))
        return [(start, len(text) if close == -1 else close + len(THINK_CLOSE))]
    if fmt == "harmony":
        return [m.span() for m in _HARMONY_ANALYSIS.finditer(text)]
    raise ValueError(f"reasoning format must be one of none, think, harmony; got {fmt!r}")


def reasoning_mask(
    ids: Sequence[int], decode: Callable[[list[int]], str], spans: Sequence[tuple[int, int]]
) -> list[int]:
    """1 for each token of ``ids`` whose first character (in ``decode(ids)``) is inside a span."""
    mask = [0] * len(ids)
    if not spans or not ids:
        return mask
    starts: dict[int, int] = {}

    def start_of(i: int) -> int:  # where token i begins: the length of the decoded prefix before it
        if i not in starts:
            starts[i] = len(decode(list(ids[:i])))
        return starts[i]

    def first_token_at_or_after(char: int) -> int:
        lo, hi = 0, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if start_of(mid) < char:
                lo = mid + 1
            else:
                hi = mid
        return lo

    for begin, end in spans:
        for i in range(first_token_at_or_after(begin), first_token_at_or_after(end)):
            mask[i] = 1
    return mask


def reasoning_text(text: str, fmt: ReasoningFormat) -> str:
    """The turn's reasoning, tags and channel headers removed (what the reasoning reward reads)."""
    parts = []
    for begin, end in reasoning_spans(text, fmt):
        span = text[begin:end]
        if fmt == "think":
            span = span.removeprefix(THINK_OPEN).removesuffix(THINK_CLOSE)
        else:
            span = re.sub(r"<\|[a-z_]+\|>|^analysis", "", span.removeprefix("<|channel|>"))
        parts.append(span.strip())
    return "\n".join(p for p in parts if p)
