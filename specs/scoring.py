"""Which reward families the Evaluator computes for each episode, from the run config.

The Evaluator (``actors/evaluator.py``) always runs the task's own evaluators (the task family:
success and its 0/1 reward); each other family is computed only when its section here is set, and is
``None`` in the ``Score`` otherwise. One value decides it: the run config's ``algorithm`` section
(``scoring_for``), so training, evaluation and benches score alike.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from specs.config import RunConfig


class AdoptionScoring(msgspec.Struct, frozen=True, kw_only=True):
    """Paper 002's shaped return and dense tool bonus (Eqs. 3-4)."""

    lambda_len: float
    lambda_cap: float
    lambda_mcp: float
    max_steps: int
    """``T_max``: the episode's turn limit."""


class ScoringConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The reward families switched on; the defaults score the task family only."""

    tool_reward: bool = False
    """MCPDisCo's R_tool against the task's ``reference_calls`` (``rewards.tool_reward``)."""
    reasoning_format: Literal["think", "harmony"] | None = None
    """Set: MCPDisCo's R_reasoning over the episode's reasoning spans in this format
    (``rewards.reasoning_reward``)."""
    adoption: AdoptionScoring | None = None
    """Set: the tool-adoption return and bonus (``rewards.adoption``)."""
    truncated_task: float | None = None
    """Set: the task reward of an episode cut by the turn or context limit (``truncated``)."""


def scoring_for(cfg: RunConfig) -> ScoringConfig:
    """The families ``cfg.algorithm`` trains on (``RunConfig`` already refused inconsistent ones)."""
    algo, rollout = cfg.algorithm, cfg.rollout
    reasoning_format: Literal["think", "harmony"] | None = None
    if algo.reasoning_reward and rollout.reasoning_format != "none":
        reasoning_format = rollout.reasoning_format
    adoption = None
    if algo.returns == "adoption":
        adoption = AdoptionScoring(
            lambda_len=algo.adoption_len,
            lambda_cap=algo.adoption_cap,
            lambda_mcp=algo.tool_bonus,
            max_steps=rollout.max_turns,
        )
    return ScoringConfig(
        tool_reward=algo.tool_reward,
        reasoning_format=reasoning_format,
        adoption=adoption,
        truncated_task=algo.truncated_reward,
    )
