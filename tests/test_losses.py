"""Pins the loss formulas: the logprob shift, PPO-clip, the three aggregation modes, k1/k3 KL and the SFT NLL."""

from __future__ import annotations

import math

import pytest
import torch

from policies.losses import (
    AggMode,
    KlKind,
    agg_mode,
    aggregate,
    k3_kl,
    kl_penalty,
    masked_mean,
    ppo_clip_loss,
    predicting_positions,
    sft_loss,
    token_logprobs,
    token_logprobs_at,
)


def test_token_logprobs_score_token_t_with_the_logits_at_t_minus_one() -> None:
    probs = torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.2, 0.7], [1 / 3, 1 / 3, 1 / 3]]])
    logits = probs.log() + 3.0  # a constant offset must not matter (softmax is shift-invariant)
    ids = torch.tensor([[2, 1, 2]])
    out = token_logprobs(logits, ids)
    assert out.shape == (1, 3)
    assert out[0].tolist() == pytest.approx([0.0, math.log(0.25), math.log(0.7)], abs=1e-6)


def test_token_logprobs_ignore_the_logits_at_the_last_position() -> None:
    logits = torch.randn(2, 4, 7)
    ids = torch.randint(0, 7, (2, 4))
    changed = logits.clone()
    changed[:, -1] = torch.randn(2, 7) * 10
    assert torch.equal(token_logprobs(logits, ids), token_logprobs(changed, ids))


def test_token_logprobs_match_a_log_softmax_reference() -> None:
    logits = torch.randn(3, 5, 11)
    ids = torch.randint(0, 11, (3, 5))
    ref = torch.log_softmax(logits, dim=-1)
    out = token_logprobs(logits, ids)
    for b in range(3):
        for t in range(1, 5):
            assert out[b, t].item() == pytest.approx(ref[b, t - 1, ids[b, t]].item(), abs=1e-5)


def test_token_logprobs_refuse_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match=r"\[B, T, V\]"):
        token_logprobs(torch.zeros(2, 3, 4), torch.zeros(2, 4, dtype=torch.long))


def test_only_the_positions_that_score_a_trainable_token_are_kept() -> None:
    mask = torch.tensor([[0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 0, 1]])
    # logits at p score token p + 1: row 0 needs 1, 2; row 1 needs 2, 4; the batch the union
    assert predicting_positions(mask).tolist() == [1, 2, 4]


def test_logprobs_from_the_kept_logits_equal_the_full_ones_on_trainable_tokens() -> None:
    logits = torch.randn(2, 6, 9, requires_grad=True)
    ids = torch.randint(0, 9, (2, 6))
    mask = torch.tensor([[0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 0, 1]])
    positions = predicting_positions(mask)
    kept = token_logprobs_at(logits[:, positions], ids, positions)
    full = token_logprobs(logits, ids)
    assert torch.allclose(kept[mask.bool()], full[mask.bool()])
    assert (kept[:, [0, 1, 4]] == 0).all()  # positions no kept logit scores
    # the gradient reaches exactly the kept logits, and equals the full computation's there
    (kept * mask).sum().backward()
    grad_kept = logits.grad.clone()
    logits.grad = None
    (full * mask).sum().backward()
    assert torch.allclose(grad_kept, logits.grad) and (grad_kept[:, [0, 3, 5]] == 0).all()


def test_kept_logits_are_refused_with_the_wrong_number_of_positions() -> None:
    with pytest.raises(ValueError, match="K positions"):
        token_logprobs_at(torch.zeros(1, 2, 4), torch.zeros(1, 5, dtype=torch.long), torch.tensor([1]))


def _clip_case(ratio: float, advantage: float) -> tuple[float, float, dict[str, float]]:
    lp = torch.tensor([[0.0, math.log(ratio)]], requires_grad=True)
    old = torch.zeros(1, 2)
    mask = torch.tensor([[0, 1]])
    loss, stats = ppo_clip_loss(lp, old, torch.tensor([advantage]), mask, clip_low=0.2, clip_high=0.28)
    loss.backward()
    assert lp.grad is not None
    return loss.item(), lp.grad[0, 1].item(), stats


def test_ppo_clip_with_ratio_above_the_clip_and_positive_advantage_is_clipped_with_zero_gradient() -> None:
    loss, grad, stats = _clip_case(1.5, 2.0)
    assert loss == pytest.approx(-1.28 * 2.0)
    assert grad == 0.0
    assert stats["clip_frac"] == 1.0 and stats["clip_high_frac"] == 1.0


def test_ppo_clip_with_ratio_below_the_clip_and_negative_advantage_is_clipped_with_zero_gradient() -> None:
    loss, grad, stats = _clip_case(0.5, -1.0)
    assert loss == pytest.approx(0.8)
    assert grad == 0.0
    assert stats["clip_frac"] == 1.0 and stats["clip_low_frac"] == 1.0


def test_ppo_clip_keeps_the_unclipped_term_when_it_is_the_pessimistic_one() -> None:
    # ratio 1.5 with a negative advantage: min(1.5 * -1, 1.28 * -1) = -1.5, gradient -A * r = 1.5.
    loss, grad, stats = _clip_case(1.5, -1.0)
    assert loss == pytest.approx(1.5)
    assert grad == pytest.approx(1.5)
    assert stats["clip_frac"] == 0.0


def test_ppo_clip_inside_the_trust_region_is_the_plain_ratio_objective() -> None:
    loss, grad, stats = _clip_case(1.1, 1.0)
    assert loss == pytest.approx(-1.1)
    assert grad == pytest.approx(-1.1)
    assert stats["ratio_mean"] == pytest.approx(1.1)
    assert stats["tokens"] == 1.0


def test_ppo_clip_token_mean_weights_tokens_not_sequences() -> None:
    # Sequence 0 has three trainable tokens at advantage 1, sequence 1 one token at advantage 0.
    lp = torch.zeros(2, 4)
    mask = torch.tensor([[0, 1, 1, 1], [0, 1, 0, 0]])
    loss, _ = ppo_clip_loss(lp, lp, torch.tensor([1.0, 0.0]), mask, 0.2, 0.2)
    assert loss.item() == pytest.approx(-0.75)  # a sequence-mean would give -0.5


def test_ppo_clip_micro_batch_losses_with_the_batch_denominator_sum_to_the_batch_loss() -> None:
    torch.manual_seed(0)
    lp, old = torch.randn(4, 6) * 0.3, torch.randn(4, 6) * 0.3
    adv = torch.randn(4)
    mask = (torch.rand(4, 6) > 0.4).long()
    mask[:, 0] = 0
    full, _ = ppo_clip_loss(lp, old, adv, mask, 0.2, 0.28)
    n = float(mask.sum())
    parts = [
        ppo_clip_loss(
            lp[i : i + 1], old[i : i + 1], adv[i : i + 1], mask[i : i + 1], 0.2, 0.28, denominator=n
        )[0]
        for i in range(4)
    ]
    assert sum(p.item() for p in parts) == pytest.approx(full.item(), abs=1e-6)


def test_ppo_clip_ignores_garbage_at_masked_positions() -> None:
    lp = torch.tensor([[float("nan"), 0.0, 50.0]])
    old = torch.tensor([[0.0, 0.0, -50.0]])  # exp(100) would overflow float32
    loss, stats = ppo_clip_loss(lp, old, torch.tensor([1.0]), torch.tensor([[0, 1, 0]]), 0.2, 0.2)
    assert loss.item() == pytest.approx(-1.0)
    assert stats["ratio_max"] == pytest.approx(1.0)


def test_k3_is_nonnegative_and_zero_where_the_policies_agree() -> None:
    torch.manual_seed(0)
    lp, ref = torch.randn(8, 16), torch.randn(8, 16)
    assert bool((k3_kl(lp, ref) >= 0).all())
    assert torch.equal(k3_kl(lp, lp), torch.zeros_like(lp))


def test_k3_matches_its_formula_on_a_worked_example() -> None:
    # d = ref - lp = ln 2: exp(d) - d - 1 = 1 - ln 2
    out = k3_kl(torch.tensor([[0.0]]), torch.tensor([[math.log(2.0)]]))
    assert out.item() == pytest.approx(1.0 - math.log(2.0))


def test_masked_mean_of_an_empty_mask_is_zero_not_nan() -> None:
    x = torch.ones(2, 3, requires_grad=True)
    out = masked_mean(x, torch.zeros(2, 3))
    assert out.item() == 0.0
    out.backward()  # still part of the graph


def test_sft_loss_is_the_mean_nll_over_trainable_tokens() -> None:
    lp = torch.tensor([[0.0, -1.0, -2.0], [0.0, -3.0, -9.0]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 0]])
    assert sft_loss(lp, mask).item() == pytest.approx(2.0)
    assert sft_loss(lp, mask, denominator=6.0).item() == pytest.approx(1.0)


# -- aggregation modes ------------------------------------------------------------------------------

NAN = float("nan")
# Row 0: three trainable tokens (1, 2, 3); row 1: one (4); row 2: none (a padding row).
# Masked-out positions hold garbage that must never reach a result.
LOSS = torch.tensor([[1.0, 2.0, 3.0, NAN], [4.0, NAN, 7.0, 9.0], [NAN, 5.0, 5.0, 5.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])


def test_token_mean_divides_the_sum_over_all_tokens_by_the_token_count() -> None:
    # (1 + 2 + 3 + 4) / 4 = 2.5
    assert aggregate(LOSS, MASK, "token-mean").item() == pytest.approx(2.5)


def test_seq_mean_token_mean_averages_each_row_then_the_nonempty_rows() -> None:
    # row 0: 6 / 3 = 2, row 1: 4 / 1 = 4, row 2 has no token and does not count: (2 + 4) / 2 = 3
    assert aggregate(LOSS, MASK, "seq-mean-token-mean").item() == pytest.approx(3.0)


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "seq-mean-token-sum"])
def test_sequences_within_a_row_count_as_rows_of_their_own(mode: AggMode) -> None:
    # rows 0 and 1 of LOSS packed into one row, as sequences 0 and 1 (row 2 stays empty)
    packed_loss = torch.cat([LOSS[0], LOSS[1], torch.zeros(4)]).reshape(1, -1)
    packed_mask = torch.cat([MASK[0], MASK[1], torch.zeros(4, dtype=MASK.dtype)]).reshape(1, -1)
    sequences = torch.tensor([[0] * LOSS.shape[1] + [1] * LOSS.shape[1] + [0] * 4])
    assert aggregate(packed_loss, packed_mask, mode, max_len=4, sequences=sequences).item() == pytest.approx(
        aggregate(LOSS, MASK, mode, max_len=4).item()
    )
    assert aggregate(packed_loss, packed_mask, mode, max_len=4).item() != pytest.approx(
        aggregate(LOSS, MASK, mode, max_len=4).item()
    )  # as one sequence the row weighs differently
    with pytest.raises(ValueError, match="sequences must be"):
        aggregate(LOSS, MASK, mode, max_len=4, sequences=sequences)


def test_seq_mean_token_sum_divides_each_row_sum_by_the_constant() -> None:
    # Dr. GRPO with L = 4: row 0: 6 / 4 = 1.5, row 1: 4 / 4 = 1: (1.5 + 1) / 2 = 1.25
    assert aggregate(LOSS, MASK, "seq-mean-token-sum", max_len=4).item() == pytest.approx(1.25)
    # L = 10 (longer than the batch width: a constant, not the width): (0.6 + 0.4) / 2 = 0.5
    assert aggregate(LOSS, MASK, "seq-mean-token-sum", max_len=10).item() == pytest.approx(0.5)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_every_mode_gives_zero_for_an_empty_mask_and_stays_in_the_graph(mode: AggMode) -> None:
    x = torch.ones(2, 3, requires_grad=True)
    out = aggregate(x, torch.zeros(2, 3), mode, max_len=3)
    assert out.item() == 0.0
    out.backward()
    assert x.grad is not None and bool((x.grad == 0).all())


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_micro_batch_losses_with_the_batch_denominator_sum_to_the_batch_loss(mode: AggMode) -> None:
    torch.manual_seed(0)
    x = torch.randn(5, 6)
    mask = (torch.rand(5, 6) > 0.4).long()
    mask[2] = 0  # an empty row: not a sequence for the seq-mean modes
    full = aggregate(x, mask, mode, max_len=8)
    if mode == "token-mean":
        denominator = float(mask.sum())
    else:
        denominator = float((mask.sum(dim=-1) > 0).sum())
    parts = [
        aggregate(x[i : i + 2], mask[i : i + 2], mode, max_len=8, denominator=denominator)
        for i in range(0, 5, 2)
    ]
    assert sum(p.item() for p in parts) == pytest.approx(full.item(), abs=1e-6)


def test_aggregate_refuses_a_missing_max_len_an_unknown_mode_and_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="needs max_len > 0, got None"):
        aggregate(LOSS, MASK, "seq-mean-token-sum")
    with pytest.raises(ValueError, match="mode must be one of"):
        aggregate(LOSS, MASK, "sum")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        aggregate(LOSS, MASK[:, :2], "token-mean")


def test_ppo_clip_aggregates_by_the_chosen_mode() -> None:
    # ratio 1 everywhere, so the per-token loss is -A: row 0 three tokens at -1, row 1 one token at 0.
    lp = torch.zeros(2, 4)
    mask = torch.tensor([[0, 1, 1, 1], [0, 1, 0, 0]])
    adv = torch.tensor([1.0, 0.0])
    seq_mean, _ = ppo_clip_loss(lp, lp, adv, mask, 0.2, mode="seq-mean-token-mean")
    assert seq_mean.item() == pytest.approx(-0.5)  # (-3/3 + 0/1) / 2
    dr_grpo, _ = ppo_clip_loss(lp, lp, adv, mask, 0.2, mode="seq-mean-token-sum", max_len=6)
    assert dr_grpo.item() == pytest.approx(-0.25)  # (-3/6 + 0/6) / 2


def test_ppo_clip_without_clip_high_is_the_symmetric_clip() -> None:
    lp = torch.tensor([[0.0, math.log(1.5)]], requires_grad=True)
    loss, stats = ppo_clip_loss(lp, torch.zeros(1, 2), torch.tensor([2.0]), torch.tensor([[0, 1]]), 0.2)
    assert loss.item() == pytest.approx(-1.2 * 2.0)  # clipped at 1 + 0.2
    assert stats["clip_high_frac"] == 1.0


def test_clip_higher_lets_a_positive_advantage_token_grow_past_the_symmetric_bound() -> None:
    # ratio 1.25, A = 1: symmetric eps 0.2 clips it (gradient 0); eps_high 0.28 does not (gradient -1.25).
    def grad(clip_high: float) -> float:
        lp = torch.tensor([[0.0, math.log(1.25)]], requires_grad=True)
        loss, _ = ppo_clip_loss(
            lp, torch.zeros(1, 2), torch.tensor([1.0]), torch.tensor([[0, 1]]), 0.2, clip_high
        )
        loss.backward()
        assert lp.grad is not None
        return lp.grad[0, 1].item()

    assert grad(0.2) == 0.0
    assert grad(0.28) == pytest.approx(-1.25)


# -- KL estimators ----------------------------------------------------------------------------------


def test_kl_penalty_on_a_worked_example() -> None:
    # lp = 0, ref = ln 2, so d = ref - lp = ln 2: k1 = -ln 2 (negative), k3 = 2 - ln 2 - 1 = 1 - ln 2.
    lp, ref = torch.tensor([[0.0]]), torch.tensor([[math.log(2.0)]])
    assert kl_penalty(lp, ref, "k1").item() == pytest.approx(-math.log(2.0))
    assert kl_penalty(lp, ref, "k3").item() == pytest.approx(1.0 - math.log(2.0))
    assert kl_penalty(lp, ref, "none").item() == 0.0


def test_k1_and_k3_have_the_exact_kl_as_their_expectation_under_the_policy() -> None:
    # p = (0.5, 0.25, 0.25), q = (0.25, 0.25, 0.5): KL(p || q) = 0.5 ln 2 + 0 + 0.25 ln 0.5 = 0.25 ln 2.
    # E_p[k3] = sum_i p_i (q_i/p_i - ln(q_i/p_i) - 1) = (sum q - 1) + KL = KL.
    p = torch.tensor([[0.5, 0.25, 0.25]], dtype=torch.float64)
    q = torch.tensor([[0.25, 0.25, 0.5]], dtype=torch.float64)
    kinds: tuple[KlKind, ...] = ("k1", "k3")
    for kind in kinds:
        expected = (p * kl_penalty(p.log(), q.log(), kind)).sum().item()
        assert expected == pytest.approx(0.25 * math.log(2.0))


def test_kl_penalty_k3_agrees_with_k3_kl() -> None:
    torch.manual_seed(0)
    lp, ref = torch.randn(3, 5), torch.randn(3, 5)
    assert torch.equal(kl_penalty(lp, ref, "k3"), k3_kl(lp, ref))


def test_kl_penalty_with_a_mask_keeps_masked_infinities_out_of_value_and_gradient() -> None:
    lp = torch.tensor([[0.0, -float("inf")]], requires_grad=True)
    ref = torch.tensor([[math.log(2.0), 0.0]])
    out = kl_penalty(lp, ref, "k3", mask=torch.tensor([[1, 0]]))
    assert out[0].tolist() == pytest.approx([1.0 - math.log(2.0), 0.0])
    out.sum().backward()
    assert lp.grad is not None
    assert lp.grad[0].tolist() == pytest.approx([-1.0, 0.0])  # d k3 / d lp = -(exp(d) - 1) = -1


def test_kl_penalty_refuses_an_unknown_kind_and_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        kl_penalty(torch.zeros(1, 2), torch.zeros(1, 2), "k2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="same shape"):
        kl_penalty(torch.zeros(1, 2), torch.zeros(1, 3), "k1")


def test_agg_mode_narrows_a_known_aggregation_name_and_refuses_an_unknown_one() -> None:
    assert agg_mode("seq-mean-token-sum") == "seq-mean-token-sum"
    with pytest.raises(ValueError, match="aggregation 'token-sum' is not one of"):
        agg_mode("token-sum")
