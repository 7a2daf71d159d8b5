"""Group-relative advantages (GRPO, Shao et al. 2024, "DeepSeekMath", eq. for outcome supervision).

Each task is sampled ``G`` times; a trajectory's advantage is its reward relative to its own group:

    A_i = (r_i - mean(r)) / (std(r) + eps)        (``std_normalize=True``, GRPO)
    A_i =  r_i - mean(r)                           (``std_normalize=False``, Dr. GRPO's fix)

``std`` is the *sample* standard deviation (Bessel-corrected, ``ddof=1``): the paper writes only
``std(r)``, and its reference implementations (TRL's ``GRPOTrainer``, verl's
``compute_grpo_outcome_advantage``) call ``torch.std``, whose default is the sample estimate. For
``r = [1, 0, 0, 0]`` this gives ``A = [1.5, -0.5, -0.5, -0.5]`` (the population std would give
``[1.732, -0.577, ...]``); a test pins it.

A group whose rewards are all equal carries no learning signal: every member gets exactly 0.0 (the
formula gives ``0 / eps`` = 0 there, but we return 0.0 explicitly so ``eps`` can never matter).
A group of one member is the degenerate case of that and also gets 0.0.

Omitted: process supervision (per-step rewards), and any bonus added after normalisation (the tool
bonus lives in ``rewards/``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def grpo_advantages(rewards: torch.Tensor, *, std_normalize: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """Advantages of one group: ``[G]`` rewards in, ``[G]`` advantages out (float32 or the input's float dtype)."""
    if rewards.dim() != 1:
        raise ValueError(f"grpo_advantages: expected rewards of shape [G], got {tuple(rewards.shape)}")
    r = rewards if rewards.is_floating_point() else rewards.to(torch.float32)
    if r.numel() < 2 or bool(torch.all(r == r[0])):
        return torch.zeros_like(r)
    centered = r - r.mean()
    if not std_normalize:
        return centered
    return centered / (r.std(unbiased=True) + eps)


def group_advantages(
    rewards: Sequence[float],
    group_ids: Sequence[str],
    *,
    std_normalize: bool = True,
    eps: float = 1e-6,
) -> list[float]:
    """Advantages for a flat batch: each reward is normalised within the members sharing its group id.

    The output is in the input's order; groups may be interleaved. Computed in float64 so that the
    result does not depend on how the batch was ordered or padded.
    """
    if len(rewards) != len(group_ids):
        raise ValueError(
            f"group_advantages: {len(rewards)} rewards but {len(group_ids)} group ids; expected one id per reward"
        )
    members: dict[str, list[int]] = {}
    for i, gid in enumerate(group_ids):
        members.setdefault(gid, []).append(i)
    out = [0.0] * len(rewards)
    for idx in members.values():
        group = torch.tensor([float(rewards[i]) for i in idx], dtype=torch.float64)
        adv = grpo_advantages(group, std_normalize=std_normalize, eps=eps)
        for i, a in zip(idx, adv.tolist(), strict=True):
            out[i] = a
    return out
