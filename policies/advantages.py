"""Group-relative advantages (GRPO, Shao et al. 2024, "DeepSeekMath", eq. for outcome supervision).

Each task is sampled ``G`` times; a trajectory's advantage is its reward relative to its own group:

    A_i = (r_i - mean(r)) / (std(r) + eps)        (``std_normalize=True``, GRPO)
    A_i =  r_i - mean(r)                           (``std_normalize=False``, Dr. GRPO, Liu et al. 2025)

``std`` is the *sample* standard deviation (Bessel-corrected, ``ddof=1``): the paper writes only
``std(r)``, and its reference implementations (TRL's ``GRPOTrainer``, verl's
``compute_grpo_outcome_advantage``) call ``torch.std``, whose default is the sample estimate. For
``r = [1, 0, 0, 0]`` this gives ``A = [1.5, -0.5, -0.5, -0.5]`` (the population std would give
``[1.732, -0.577, ...]``); a test pins it.

A group whose rewards are all equal carries no learning signal: every member gets exactly 0.0 (the
formula gives ``0 / eps`` = 0 there, but we return 0.0 explicitly so ``eps`` can never matter).
A group of one member is the degenerate case of that and also gets 0.0.

Dynamic sampling (DAPO, Yu et al. 2025, §3.2 "Dynamic Sampling"): a group whose members all succeed
or all fail has zero advantage everywhere, so it only dilutes the batch. With ``r_i`` the rewards of
one group of size ``G``, ``tau`` a success threshold and ``(lo, hi)`` an open band, the group's
success rate and the keep rule are

    acc   = |{i : r_i >= tau}| / G
    keep  = lo < acc < hi  and  not (r_1 = ... = r_G)

DAPO keeps ``0 < acc < 1`` (the default band ``(0, 1)`` drops exactly the all-fail and all-success
groups); paper 002 (App. F, Table 6, "Acc. filter") uses ``(acc_lo, acc_hi) = (0.05, 0.95)``, which for
``G = 8`` keeps the same groups. ``band=None`` keeps only the all-equal rule, for graded rewards where
a group with no full success still carries signal. Groups of one member are all-equal and dropped.

Omitted: process supervision (per-step rewards), DAPO's re-sampling loop that refills the batch
after filtering (the caller's), and any bonus added after normalisation (the tool bonus lives in
``rewards/``).
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


def success_rate(rewards: Sequence[float], *, threshold: float = 1.0) -> float:
    """Share of ``rewards`` that are ``>= threshold`` (DAPO's per-group accuracy)."""
    if len(rewards) == 0:
        raise ValueError("success_rate: rewards is empty; expected the rewards of one non-empty group")
    return sum(1 for r in rewards if r >= threshold) / len(rewards)


def keep_group(
    rewards: Sequence[float],
    *,
    threshold: float = 1.0,
    band: tuple[float, float] | None = (0.0, 1.0),
) -> bool:
    """DAPO dynamic-sampling rule for one group: keep iff rewards differ and ``lo < acc < hi``."""
    if band is not None and not band[0] < band[1]:
        raise ValueError(f"keep_group: band must be (low, high) with low < high, got {band}")
    acc = success_rate(rewards, threshold=threshold)
    if all(r == rewards[0] for r in rewards):
        return False
    return band is None or band[0] < acc < band[1]


def keep_groups(
    rewards: Sequence[float],
    group_ids: Sequence[str],
    *,
    threshold: float = 1.0,
    band: tuple[float, float] | None = (0.0, 1.0),
) -> dict[str, bool]:
    """``keep_group`` for a flat batch: group id -> keep, groups in order of first appearance."""
    if len(rewards) != len(group_ids):
        raise ValueError(
            f"keep_groups: {len(rewards)} rewards but {len(group_ids)} group ids; expected one id per reward"
        )
    members: dict[str, list[float]] = {}
    for r, gid in zip(rewards, group_ids, strict=True):
        members.setdefault(gid, []).append(float(r))
    return {gid: keep_group(rs, threshold=threshold, band=band) for gid, rs in members.items()}
