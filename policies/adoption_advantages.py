"""Tool-adoption advantages (paper 002, §5.1, Eq. 4): per-step group advantages with the dense tool
bonus added *after* normalisation, which is advantage shaping, so it lives with the algorithms.

For a group of ``G`` trajectories of one task with shaped returns ``R_i`` (Eq. 3, ``rewards.adoption``,
carried in each trajectory's ``Score.adoption``) and ``T_i`` steps, step ``t`` of trajectory ``i`` gets::

    A_t = (1/T_i) * (R_i - mu) / sigma  +  lambda_mcp * b_t

``mu``, ``sigma`` follow ``policies.advantages`` (sample std plus ``eps``; an all-equal group gets 0);
``lambda_mcp * b_t`` is ``AdoptionScore.step_bonus[t - 1]``, scored by the Evaluator.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.advantages import group_advantages
from specs.trajectory import AdoptionScore


def group_step_advantages(
    returns: Sequence[float], steps: Sequence[int], *, eps: float = 1e-6
) -> list[float]:
    """Eq. (4) without the bonus, for one group: ``z_i / T_i``, the advantage of each of trajectory i's steps."""
    if len(returns) != len(steps):
        raise ValueError(
            f"group_step_advantages: {len(returns)} returns but {len(steps)} step counts; expected one each"
        )
    for i, t in enumerate(steps):
        if t < 1:
            raise ValueError(
                f"group_step_advantages: steps[{i}] must be >= 1 (a trajectory has a step), got {t}"
            )
    z = group_advantages([float(r) for r in returns], ["group"] * len(returns), eps=eps)
    return [zi / t for zi, t in zip(z, steps, strict=True)]


def step_advantages_with_bonus(scores: Sequence[AdoptionScore], *, eps: float = 1e-6) -> list[list[float]]:
    """Eq. (4) for one group: ``out[i][t-1]`` is ``A_t`` of trajectory i's step ``t`` (bonus added after z-scoring)."""
    for i, score in enumerate(scores):
        if len(score.step_bonus) != score.steps:
            raise ValueError(
                f"step_advantages_with_bonus: trajectory {i} has {score.steps} steps but "
                f"{len(score.step_bonus)} step bonuses; expected one per step"
            )
    base = group_step_advantages([s.shaped_return for s in scores], [s.steps for s in scores], eps=eps)
    return [[a + b for b in score.step_bonus] for a, score in zip(base, scores, strict=True)]
