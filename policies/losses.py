"""Policy-gradient and supervised losses on per-token log-probabilities: pure torch, no engine.

Conventions shared by every function here:

- Tensors are ``[B, T]``, aligned with the token ids: position ``t`` holds the log-probability of
  token ``t`` given tokens ``< t``. ``token_logprobs`` does the one shift (logits at ``t - 1``
  score token ``t``); position 0 has no prefix and gets 0.0.
- ``mask`` is 1 on trainable tokens (the policy's own), 0 elsewhere; any dtype. Values at masked-out
  positions never reach a result, even when they are ``inf`` or ``nan``.
- Aggregation is **token-mean** (DAPO's "token-level policy gradient loss", Yu et al. 2025): the
  sum over every trainable token of the batch divided by the number of those tokens, so a long
  sequence weighs more than a short one, token for token. ``denominator`` replaces that count when a
  caller splits one batch into micro-batches: with the whole batch's token count there, the sum of
  the micro-batch losses is exactly the token-mean of the batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """``[B, T, V]`` logits, ``[B, T]`` ids -> ``[B, T]``: out[:, t] = log p(ids[:, t] | ids[:, :t]).

    Logits at position ``t - 1`` predict token ``t``; out[:, 0] is 0.0. Computed in float32.
    """
    if logits.dim() != 3 or token_ids.shape != logits.shape[:2]:
        raise ValueError(
            f"token_logprobs: expected logits [B, T, V] and token_ids [B, T], "
            f"got {tuple(logits.shape)} and {tuple(token_ids.shape)}"
        )
    batch, width, vocab = logits.shape
    pred = logits[:, :-1].float().reshape(-1, vocab)
    target = token_ids[:, 1:].long().reshape(-1)
    # Fused log-softmax + pick (cross-entropy), the cheapest exact form on CPU and GPU.
    shifted = -F.cross_entropy(pred, target, reduction="none").view(batch, width - 1)
    first = torch.zeros_like(shifted[:, :1])
    return torch.cat([first, shifted], dim=1)


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of ``x`` over positions where ``mask`` is nonzero (masked-out values, even ``nan``, ignored)."""
    return torch.where(mask.bool(), x, torch.zeros_like(x)).sum()


def masked_mean(x: torch.Tensor, mask: torch.Tensor, *, denominator: float | None = None) -> torch.Tensor:
    """Token-mean of ``x`` over ``mask``; divides by ``denominator`` instead of the mask count when given.

    An empty mask gives 0.0 (still connected to the graph), not ``nan``.
    """
    count = mask.bool().sum().clamp_min(1) if denominator is None else denominator
    return masked_sum(x, mask) / count


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
    *,
    denominator: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate with asymmetric clip ("clip-higher", DAPO), token-mean aggregated.

    Per token: ``r = exp(lp - lp_old)``, ``loss = -min(r * A, clip(r, 1 - clip_low, 1 + clip_high) * A)``.
    ``advantages`` is ``[B]`` (one per sequence, broadcast over its tokens, as in GRPO) or ``[B, T]``.
    Where the clipped term is the smaller one the token's gradient is zero: ratio above
    ``1 + clip_high`` with A > 0, or below ``1 - clip_low`` with A < 0.

    Stats (floats over the masked tokens): ``clip_frac`` (tokens whose gradient the clip removed),
    ``clip_high_frac``, ``clip_low_frac``, ``ratio_mean``, ``ratio_min``, ``ratio_max``, ``tokens``.
    Omitted: dual-clip PPO and value-function terms (GRPO has no critic).
    """
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    keep = mask.bool()
    log_ratio = torch.where(keep, logprobs - old_logprobs, torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    loss = masked_mean(per_token, mask, denominator=denominator)

    with torch.no_grad():
        adv_full = adv.expand_as(ratio)
        high = (ratio > 1.0 + clip_high) & (adv_full > 0) & keep
        low = (ratio < 1.0 - clip_low) & (adv_full < 0) & keep
        n = int(keep.sum())
        denom = max(n, 1)
        kept = ratio[keep]
        stats = {
            "clip_frac": float((high | low).sum()) / denom,
            "clip_high_frac": float(high.sum()) / denom,
            "clip_low_frac": float(low.sum()) / denom,
            "ratio_mean": float(kept.sum()) / denom,
            "ratio_min": float(kept.min()) if n else 1.0,
            "ratio_max": float(kept.max()) if n else 1.0,
            "tokens": float(n),
        }
    return loss, stats


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(policy || ref) per token: ``exp(d) - d - 1`` with ``d = ref - lp``.

    Unbiased for samples drawn from the policy, always >= 0, and 0 exactly where the two agree
    (the estimator GRPO uses for its KL penalty). Returns ``[B, T]``; aggregate with ``masked_mean``.
    """
    d = ref_logprobs - logprobs
    return torch.exp(d) - d - 1.0


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor, *, denominator: float | None = None) -> torch.Tensor:
    """Supervised negative log-likelihood, token-mean over the trainable tokens (warm start from demos)."""
    return masked_mean(-logprobs, mask, denominator=denominator)
