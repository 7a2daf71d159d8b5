"""Policy-gradient and supervised losses on per-token log-probabilities: pure torch, no engine.

Conventions shared by every function here:

- Tensors are ``[B, T]``, aligned with the token ids: position ``t`` holds the log-probability of
  token ``t`` given tokens ``< t``. ``token_logprobs`` does the one shift (logits at ``t - 1``
  score token ``t``); position 0 has no prefix and gets 0.0.
- ``mask`` is 1 on trainable tokens (the policy's own), 0 elsewhere; any dtype. Values at masked-out
  positions never reach a result, even when they are ``inf`` or ``nan``.

PPO-clip with asymmetric clip (DAPO §3.1 "clip-higher"; ``eps_low = clip_low``, ``eps_high = clip_high``),
per token, with ``r = exp(lp - lp_old)``:

    l_t = -min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)

Aggregation of a per-token loss ``l[b, t]`` with mask ``m[b, t]`` (``aggregate``); ``S`` is the set
of rows with at least one trainable token, ``L`` a constant:

    token-mean            sum_b sum_t m l / sum_b sum_t m          (DAPO §3.3, the default)
    seq-mean-token-mean   1/|S| sum_{b in S} (sum_t m l / sum_t m)  (GRPO as written, Shao et al. 2024)
    seq-mean-token-sum    1/|S| sum_{b in S} (sum_t m l / L)        (Dr. GRPO, Liu et al. 2025: L = max length)

token-mean weighs every token alike (a long sequence counts more); seq-mean-token-mean weighs every
sequence alike (so a token of a long wrong answer is penalised less: GRPO's length bias);
seq-mean-token-sum removes that bias with a constant divisor. A "sequence" is a row of the batch:
where a trajectory is split into several rows (rendering segments), each row counts as one. A row
may also carry several sequences (``sequences[b, t]``: the index of token ``t``'s sequence within
row ``b``; the steps of a packed adoption row), and each counts as one, exactly as if it had a row
of its own: the sums above then run over (row, sequence) pairs.
``denominator`` replaces the divisor that spans the batch (the token count for token-mean, ``|S|``
for the seq-mean modes) so that micro-batch losses computed with the whole batch's figure sum
exactly to the batch loss; the learner passes the step's trainable-token count with token-mean.

KL penalty per token (Schulman 2020, "Approximating KL divergence"), ``d = lp_ref - lp``:

    k1 = -d = lp - lp_ref        unbiased for KL(pi || ref), can be negative
    k3 = exp(d) - d - 1          unbiased and >= 0 (GRPO's choice; paper 002 App. F, Table 6)

As a loss term k1's gradient is ``grad lp``, whose expectation on the policy's own samples is zero;
it acts mainly through off-policy drift or when folded into the reward. The reference is the
caller's choice: the frozen base model (GRPO; paper 000 App. A, beta = 1e-3) or the rollout-time
policy (paper 002 App. F "Optimization", beta = 0.02: anchoring to the base model cancelled
their per-step tool bonus). With the rollout-time policy, ``ref_logprobs`` are the sampler's logprobs.
"""

from __future__ import annotations

from typing import Literal, cast, get_args

import torch
import torch.nn.functional as F

AggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
KlKind = Literal["none", "k1", "k3"]


def agg_mode(name: str) -> AggMode:
    """``name`` as an ``AggMode``, refused naming the modes when it is none of them."""
    for mode in get_args(AggMode):
        if name == mode:
            return cast(AggMode, mode)
    raise ValueError(f"aggregation {name!r} is not one of {get_args(AggMode)}")


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


def predicting_positions(mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` trainable mask -> the 1-D sorted positions ``p`` in ``0 .. T-2`` whose logits score a
    trainable token (``mask[b, p + 1]`` set in some row ``b``): all the logits a loss needs. A model
    asked for those only (HF's ``logits_to_keep``) skips the vocabulary projection of the prompt
    and observation tokens, most of a multi-turn agent's context."""
    return mask[:, 1:].bool().any(dim=0).nonzero().flatten()


def token_logprobs_at(logits: torch.Tensor, token_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``[B, K, V]`` logits at ``positions`` (``predicting_positions``), ``[B, T]`` ids -> ``[B, T]``:
    ``token_logprobs`` at the tokens ``positions + 1``, 0.0 at every other position (which a loss
    masks out). Computed in float32."""
    batch, kept, vocab = logits.shape
    if token_ids.shape[0] != batch or positions.shape != (kept,):
        raise ValueError(
            f"token_logprobs_at: expected logits [B, K, V], token_ids [B, T] and K positions, got "
            f"{tuple(logits.shape)}, {tuple(token_ids.shape)} and {tuple(positions.shape)}"
        )
    targets = token_ids[:, positions + 1].long().reshape(-1)
    picked = -F.cross_entropy(logits.float().reshape(-1, vocab), targets, reduction="none").view(batch, kept)
    zeros = torch.zeros(token_ids.shape, dtype=picked.dtype, device=picked.device)
    return zeros.index_copy(1, positions + 1, picked)


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of ``x`` over positions where ``mask`` is nonzero (masked-out values, even ``nan``, ignored)."""
    return torch.where(mask.bool(), x, torch.zeros_like(x)).sum()


def masked_mean(x: torch.Tensor, mask: torch.Tensor, *, denominator: float | None = None) -> torch.Tensor:
    """Token-mean of ``x`` over ``mask``; divides by ``denominator`` instead of the mask count when given.

    An empty mask gives 0.0 (still connected to the graph), not ``nan``.
    """
    count = mask.bool().sum().clamp_min(1) if denominator is None else denominator
    return masked_sum(x, mask) / count


def aggregate(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    mode: AggMode,
    *,
    max_len: int | None = None,
    denominator: float | None = None,
    sequences: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce a ``[B, T]`` per-token loss to a scalar by ``mode`` (equations in the module docstring).

    ``max_len`` is Dr. GRPO's constant ``L`` (required for ``seq-mean-token-sum``, ignored otherwise).
    ``denominator`` replaces the batch-wide divisor (token count, or the number of non-empty
    sequences). ``sequences`` (``[B, T]`` integers >= 0; ``None``: one sequence a row) splits rows
    into sequences for the seq-mean modes. An empty mask gives 0.0, still connected to the graph.
    """
    if per_token_loss.dim() != 2 or mask.shape != per_token_loss.shape:
        raise ValueError(
            f"aggregate: expected per_token_loss and mask of the same shape [B, T], "
            f"got {tuple(per_token_loss.shape)} and {tuple(mask.shape)}"
        )
    if mode == "token-mean":
        return masked_mean(per_token_loss, mask, denominator=denominator)
    keep = mask.bool()
    masked = torch.where(keep, per_token_loss, torch.zeros_like(per_token_loss))
    if sequences is None:
        row_sum, row_tokens = masked.sum(dim=-1), keep.sum(dim=-1)
    else:  # one "row" per (row, sequence): sums and token counts scattered by sequence index
        if sequences.shape != per_token_loss.shape:
            raise ValueError(
                f"aggregate: sequences must be [B, T] like the loss, got {tuple(sequences.shape)}"
            )
        index = sequences.long()
        width = int(index.max()) + 1 if index.numel() else 1
        row_sum = masked.new_zeros(masked.shape[0], width).scatter_add(1, index, masked).flatten()
        row_tokens = (
            keep.new_zeros(keep.shape[0], width, dtype=torch.long)
            .scatter_add(1, index, keep.long())
            .flatten()
        )
    if mode == "seq-mean-token-mean":
        per_row = row_sum / row_tokens.clamp_min(1)
    elif mode == "seq-mean-token-sum":
        if max_len is None or max_len <= 0:
            raise ValueError(f"aggregate: mode 'seq-mean-token-sum' needs max_len > 0, got {max_len}")
        per_row = row_sum / max_len
    else:
        raise ValueError(f"aggregate: mode must be one of {get_args(AggMode)}, got {mode!r}")
    rows = (row_tokens > 0).sum().clamp_min(1) if denominator is None else denominator
    return per_row.sum() / rows


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float,
    clip_high: float | None = None,
    *,
    denominator: float | None = None,
    mode: AggMode = "token-mean",
    max_len: int | None = None,
    sequences: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate with asymmetric clip ("clip-higher", DAPO), aggregated by ``mode``.

    Per token: ``r = exp(lp - lp_old)``, ``loss = -min(r * A, clip(r, 1 - clip_low, 1 + clip_high) * A)``;
    ``clip_high=None`` is the symmetric PPO clip (``clip_high = clip_low``). ``mode``, ``max_len``,
    ``denominator`` and ``sequences`` go to ``aggregate`` (default token-mean, as before).
    ``advantages`` is ``[B]`` (one per sequence, broadcast over its tokens, as in GRPO) or ``[B, T]``.
    Where the clipped term is the smaller one the token's gradient is zero: ratio above
    ``1 + clip_high`` with A > 0, or below ``1 - clip_low`` with A < 0.

    Stats (floats over the masked tokens): ``clip_frac`` (tokens whose gradient the clip removed),
    ``clip_high_frac``, ``clip_low_frac``, ``ratio_mean``, ``ratio_min``, ``ratio_max``, ``tokens``.
    Omitted: dual-clip PPO and value-function terms (GRPO has no critic).
    """
    if clip_high is None:
        clip_high = clip_low
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    keep = mask.bool()
    log_ratio = torch.where(keep, logprobs - old_logprobs, torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    loss = aggregate(per_token, mask, mode, max_len=max_len, denominator=denominator, sequences=sequences)

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


def kl_penalty(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    kind: KlKind,
    *,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL(policy || ref) estimate, ``[B, T]``: ``none`` (zeros), ``k1`` or ``k3``.

    ``ref_logprobs`` come from the base model or from the rollout-time policy (module docstring).
    With ``mask``, masked-out positions are 0.0 and their values (even ``inf``) never reach the
    result or its gradient. Aggregate with ``aggregate``.
    """
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(
            f"kl_penalty: logprobs {tuple(logprobs.shape)} and ref_logprobs {tuple(ref_logprobs.shape)} "
            "must have the same shape"
        )
    if kind not in get_args(KlKind):
        raise ValueError(f"kl_penalty: kind must be one of {get_args(KlKind)}, got {kind!r}")
    if kind == "none":
        return torch.zeros_like(logprobs)
    d = ref_logprobs - logprobs
    if mask is not None:
        # Zeroed before exp, so a masked-out inf can turn neither the value nor the gradient into nan.
        d = torch.where(mask.bool(), d, torch.zeros_like(d))
    return -d if kind == "k1" else torch.exp(d) - d - 1.0


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor, *, denominator: float | None = None) -> torch.Tensor:
    """Supervised negative log-likelihood, token-mean over the trainable tokens (warm start from demos)."""
    return masked_mean(-logprobs, mask, denominator=denominator)
