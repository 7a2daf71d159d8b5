"""Episode metrics: what a user watches to see whether the agent learns to use its tools.

- ``success``: share of scored episodes with reward 1 (every evaluator passed).
- ``reward``: mean reward.
- ``tool_calls``: mean tool calls per episode.
- ``tool_adoption``: share of episodes with at least one tool call that succeeded.
- ``valid_call``: share of episodes whose first turn is a well-formed call of a real tool with
  valid arguments (the tool ran, successfully or with a tool-level error).
- ``turns``, ``gen_tokens``: mean model turns and generated tokens per episode.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.types import Trajectory

MALFORMED = frozenset({"parse_error", "unknown_tool", "bad_arguments"})


def episode_metrics(trajectories: Sequence[Trajectory], prefix: str = "") -> dict[str, float]:
    """Means over scored trajectories (failed ones are counted separately by the pipeline)."""
    scored = [t for t in trajectories if t.status == "ok" and t.reward is not None]
    n = len(scored)
    if n == 0:
        return {f"{prefix}episodes": 0.0}

    def mean(values: Sequence[float]) -> float:
        return sum(values) / n

    out = {
        "episodes": float(n),
        "success": mean([1.0 if (t.reward or 0.0) >= 1.0 else 0.0 for t in scored]),
        "reward": mean([float(t.reward or 0.0) for t in scored]),
        "tool_calls": mean([float(len(t.tool_calls)) for t in scored]),
        "tool_adoption": mean([1.0 if any(c.ok for c in t.tool_calls) else 0.0 for t in scored]),
        "valid_call": mean([1.0 if _first_turn_valid(t) else 0.0 for t in scored]),
        "turns": mean([float(t.num_turns) for t in scored]),
        "gen_tokens": mean([float(t.num_generated_tokens) for t in scored]),
    }
    return {f"{prefix}{k}": v for k, v in out.items()}


def _first_turn_valid(t: Trajectory) -> bool:
    first = [c for c in t.tool_calls if c.turn == 1]
    return bool(first) and first[0].error_kind not in MALFORMED
