"""The learner's micro-batch losses: GRPO-family PPO-clip with its KL term, the KL term alone, SFT.

Each maker returns a ``MicroLoss``: ``micro_loss(batch, total, rows) -> (loss, metrics)`` on one
collated micro-batch (``actors.learner_batch``). The loss is already divided by the whole step's
trainable-token count ``total`` (token-mean) or its number of sequences ``rows`` (the seq-mean
aggregations), so the micro-batch losses of a step sum to the step's loss whatever the micro-batch
size. Metrics add up over micro-batches (``*_max`` ones take the maximum): the token-weighted ones
are pre-multiplied by the micro-batch's share of ``total``.

``policy`` is the current model's per-token logprobs (with gradient); ``reference`` the frozen
base model's (no gradient), or ``None`` for the rollout-time policy, whose logprobs are the
batch's ``old`` ones. The formulas are ``policies.losses``'; here they are only wired to a batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from actors.learner_batch import Batch, model_inputs

if TYPE_CHECKING:
    import torch

    from specs.algorithm import GrpoConfig

Forward = Callable[[Batch], "torch.Tensor"]
"""Per-token logprobs ``[B, T]`` of a collated micro-batch under some model."""
MicroLoss = Callable[[Batch, float, float], "tuple[torch.Tensor, dict[str, float]]"]
"""``(batch, total, rows) -> (loss, metrics)``; see the module docstring."""


def forward_logprobs(model: Any, batch: Batch, *, every_token: bool = False) -> torch.Tensor:
    """``model``'s logprob of each trainable token of ``batch`` given its prefix, 0.0 elsewhere:
    the model projects onto the vocabulary only the positions that score a trainable token of some
    row (``policies.losses.predicting_positions``, HF's ``logits_to_keep``), which for an agent
    whose context is mostly prompt and observations is most of the logits' memory and time.
    ``every_token`` (or a model that does not take ``logits_to_keep``): every token's logprob
    (position 0 gets 0.0). A vision-language model also gets the batch's pixel tensors."""
    from policies.losses import predicting_positions, token_logprobs, token_logprobs_at

    ids, attn, pixels = batch["ids"], batch["attn"], model_inputs(batch)
    if not every_token and _keeps_logits(model):
        positions = predicting_positions(batch["mask"])
        if positions.numel():
            logits = model(
                input_ids=ids, attention_mask=attn, use_cache=False, logits_to_keep=positions, **pixels
            ).logits
            return token_logprobs_at(logits, ids, positions)
    logits = model(input_ids=ids, attention_mask=attn, use_cache=False, **pixels).logits
    return token_logprobs(logits, ids)


def _keeps_logits(model: Any) -> bool:
    """Whether the HF model (under a DeepSpeed engine or not) takes ``logits_to_keep``."""
    import inspect

    module = getattr(model, "module", model)
    return "logits_to_keep" in inspect.signature(module.forward).parameters


def _kl_term(
    algo: GrpoConfig, max_len: int, lp: torch.Tensor, ref_lp: torch.Tensor, batch: Batch, denominator: float
) -> torch.Tensor:
    from policies.losses import agg_mode, aggregate, kl_penalty

    per_token = kl_penalty(lp, ref_lp, algo.kl_estimator, mask=batch["mask"])
    mode = agg_mode(algo.aggregation)
    return aggregate(
        per_token, batch["mask"], mode, max_len=max_len, denominator=denominator, sequences=batch["seq"]
    )


def policy_loss(
    algo: GrpoConfig,
    max_len: int,
    policy: Forward,
    reference: Forward | None,
    streams: tuple[str, ...],
    *,
    kl: bool,
) -> MicroLoss:
    """PPO-clip on the sum of the advantages ``streams`` (``adv_reasoning``, ``adv_tool``) against the
    rollout logprobs, aggregated as ``algo.aggregation``, plus ``kl_coef`` x KL when ``kl``."""
    import torch

    from policies.losses import agg_mode, k3_kl, masked_mean, ppo_clip_loss

    mode = agg_mode(algo.aggregation)

    def micro_loss(batch: Batch, total: float, rows: float) -> tuple[torch.Tensor, dict[str, float]]:
        lp, mask = policy(batch), batch["mask"]
        denominator = total if mode == "token-mean" else rows
        advantages = sum((batch[name] for name in streams), torch.zeros_like(mask))
        pg, stats = ppo_clip_loss(
            lp,
            batch["old"],
            advantages,
            mask,
            algo.clip_low,
            algo.clip_high,
            denominator=denominator,
            mode=mode,
            max_len=max_len,
            sequences=batch["seq"],
        )
        loss, kl_value = pg, 0.0
        with torch.no_grad():
            # k3 of the rollout policy against the current one: train/inference mismatch + drift.
            rollout_kl = float(masked_mean(k3_kl(lp, batch["old"]), mask, denominator=total))
            ref_lp = None
            if kl and algo.kl_coef > 0:
                ref_lp = reference(batch) if reference is not None else batch["old"]
        if ref_lp is not None:
            kl_term = _kl_term(algo, max_len, lp, ref_lp, batch, denominator)
            loss, kl_value = pg + algo.kl_coef * kl_term, float(kl_term.detach())
        weight = stats["tokens"] / total
        return loss, {
            "loss": float(loss.detach()),
            "pg_loss": float(pg.detach()),
            "kl": kl_value,
            "rollout_kl": rollout_kl,
            "clip_frac": stats["clip_frac"] * weight,
            "ratio_mean": stats["ratio_mean"] * weight,
            "ratio_max": stats["ratio_max"],
        }

    return micro_loss


def kl_loss(algo: GrpoConfig, max_len: int, policy: Forward, reference: Forward | None) -> MicroLoss:
    """``kl_coef`` x KL alone (gradient surgery's shared regulariser, which is never projected)."""
    import torch

    from policies.losses import agg_mode

    mode = agg_mode(algo.aggregation)

    def micro_loss(batch: Batch, total: float, rows: float) -> tuple[torch.Tensor, dict[str, float]]:
        lp = policy(batch)
        with torch.no_grad():
            ref_lp = reference(batch) if reference is not None else batch["old"]
        kl_term = _kl_term(algo, max_len, lp, ref_lp, batch, total if mode == "token-mean" else rows)
        return algo.kl_coef * kl_term, {"kl": float(kl_term.detach())}

    return micro_loss


def supervised_loss(policy: Forward) -> MicroLoss:
    """Mean NLL of the step's trainable tokens (the supervised warm start)."""
    from policies.losses import sft_loss

    def micro_loss(batch: Batch, total: float, rows: float) -> tuple[torch.Tensor, dict[str, float]]:
        loss = sft_loss(policy(batch), batch["mask"], denominator=total)
        return loss, {"loss": float(loss.detach())}

    return micro_loss
