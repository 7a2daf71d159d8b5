"""The ``algorithm`` section of a run config: the GRPO family and the seeds' training methods.

Every method is a switch here; the equations are in the README ("Training methods") and in the
modules each field names. Kept apart from ``specs/config.py`` (which re-exports it) because it is
the part of the config that grows with every method.
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec


class GrpoConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The GRPO family. ``type`` picks the defaults of the fields left ``null``:

    | type | advantage | loss aggregation | group filter |
    | --- | --- | --- | --- |
    | ``grpo`` | (r - mean) / std | seq-mean-token-mean | none |
    | ``dr_grpo`` | r - mean | seq-mean-token-sum (L = rollout.max_context_tokens) | none |
    | ``dapo`` | (r - mean) / std | token-mean | drop all-fail / all-pass groups |
    """

    type: Literal["grpo", "dr_grpo", "dapo"] = "grpo"
    """Algorithm of the GRPO family (see the table above)."""
    clip_low: float = 0.2
    """PPO ratio clip below 1 (ratio >= 1 - clip_low)."""
    clip_high: float = 0.2
    """PPO ratio clip above 1 (ratio <= 1 + clip_high). Not part of the ``type`` presets: DAPO's
    paper raises it to 0.28 ("clip-higher"); set it explicitly."""
    kl_coef: float = 0.0
    """Weight of the KL penalty; 0 disables it (and the reference model)."""
    kl_estimator: Literal["k1", "k3"] = "k3"
    """KL estimator: ``k1`` = logp - logp_ref, ``k3`` = exp(d) - d - 1 with d = logp_ref - logp."""
    kl_reference: Literal["base", "rollout"] = "base"
    """KL against a frozen copy of the policy RL starts from (``base``: the model after its warm
    start, the base model without one) or against the rollout-time policy (its recorded logprobs:
    no copy)."""
    std_normalize: bool | None = None
    """Divide group-centred rewards by the group's standard deviation (``null``: by ``type``)."""
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] | None = None
    """How per-token losses become the step loss (``null``: by ``type``)."""
    group_band: tuple[float, float] | None = None
    """Keep only groups whose success rate is strictly inside this band (``null``: by ``type`` and
    ``returns``: ``dapo``: (0, 1), i.e. drop all-fail and all-pass groups; ``returns: adoption``:
    paper 002's accuracy filter (0.05, 0.95), Table 6; else none)."""
    eps: float = 1e-6
    """Added to the group standard deviation so equal rewards give advantage 0, not NaN."""
    attribution: Literal["integrated", "masked"] = "integrated"
    """How the reasoning and tool reward families' advantages reach the tokens (paper 000,
    eqs. 9-10): ``integrated``, their sum on every generated token; ``masked``, the reasoning
    advantage on reasoning tokens only and the tool advantage on action tokens only."""
    surgery: bool = False
    """Bidirectional gradient surgery (paper 000, eq. 11): when the two families' gradients
    conflict, project each off the other before summing. Needs learner.zero_stage 0."""
    returns: Literal["outcome", "adoption"] = "outcome"
    """``outcome``: one sample per trajectory with its group advantage. ``adoption`` (tool-adoption
    paper, eqs. 3-4): shaped return +-1 - adoption_len T/T_max - adoption_cap [T >= T_max]
    (T_max = rollout.max_turns), z-scored in the group, divided by T, one sample per step, plus
    ``tool_bonus`` after normalisation on steps with a new, successful, non-read-only call."""
    adoption_len: float = 0.05
    """lambda_len of the adoption return."""
    adoption_cap: float = 0.2
    """lambda_cap of the adoption return."""
    tool_bonus: float = 0.1
    """lambda_mcp, the dense tool bonus of the adoption returns (0: off)."""
    reasoning_reward: bool = False
    """Score each trajectory's reasoning (paper 000, eqs. 1-4: keyword relevance density +
    0.5 x sentence coherence + structure; ``rewards/reasoning_reward.py``) and train on its
    group-normalised advantage as the reasoning family. Needs rollout.reasoning_format."""
    tool_reward: bool = False
    """Train the tool family on MCPDisCo's tool reward (paper 000, eqs. 5-8: format + correctness
    against the task's ``reference_calls`` + penalties + terminal shaping on success;
    ``rewards/tool_reward.py``) instead of the evaluator's outcome reward. Needs returns: outcome."""
    truncated_reward: float | None = None
    """The task reward of an episode cut by the turn or context limit before its final answer:
    ``None`` keeps the evaluators' (an evaluator that checks only the end state passes an agent that
    made the change and then looped to the turn limit, so RL learns not to stop: BENCHMARKS.md,
    apps at lr 5e-6); ``0.0`` scores it as failed. Success, the metric, stays the evaluators'. Only
    the outcome family reads it: ``tool_reward`` withholds its own terminal bonus from a cut episode,
    and ``returns: adoption`` builds on success."""

    def __post_init__(self) -> None:
        if not (0 <= self.clip_low < 1 and self.clip_high >= 0 and self.kl_coef >= 0 and self.eps > 0):
            raise ValueError("algorithm: need 0 <= clip_low < 1, clip_high >= 0, kl_coef >= 0, eps > 0")
        if self.truncated_reward is not None and not math.isfinite(self.truncated_reward):
            raise ValueError(
                f"algorithm.truncated_reward must be a finite number, got {self.truncated_reward}"
            )
        if self.group_band is not None and not 0 <= self.group_band[0] < self.group_band[1] <= 1:
            raise ValueError(
                f"algorithm.group_band must be (low, high) with 0 <= low < high <= 1, got {self.group_band}"
            )

    @property
    def normalize_std(self) -> bool:
        return self.std_normalize if self.std_normalize is not None else self.type != "dr_grpo"

    @property
    def aggregation(self) -> str:
        default = {"grpo": "seq-mean-token-mean", "dr_grpo": "seq-mean-token-sum", "dapo": "token-mean"}
        return self.loss_agg or default[self.type]

    @property
    def band(self) -> tuple[float, float] | None:
        if self.group_band is not None:
            return self.group_band
        if self.type == "dapo":
            return (0.0, 1.0)
        return (0.05, 0.95) if self.returns == "adoption" else None

    @property
    def needs_reference_model(self) -> bool:
        return self.kl_coef > 0 and self.kl_reference == "base"
