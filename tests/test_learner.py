"""The Learner on a real DeepSpeed engine (CPU, ZeRO-0, gloo) with a tiny random Llama.

The model is random but real: a tied-embedding LlamaForCausalLM saved as an HF directory, so these
tests exercise the same loading, batching, optimizer, export and checkpoint code as a real run.
"""

from __future__ import annotations

import math
from pathlib import Path

import msgspec
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from actors.learner import Learner
from actors.learner_batch import Batch, LearnerError
from actors.learner_losses import kl_loss, policy_loss
from policies.surgery import assign_grads, cosine, flatten_grads, project
from policies.types import TrainSample
from specs.algorithm import GrpoConfig
from specs.config import LearnerConfig

VOCAB = 512


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def tiny_llama(path: Path) -> str:
    """A two-layer Llama with random weights saved in ``path``; its directory."""
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    (path / "chat_template.jinja").write_text("{{ messages }}")  # stands in for tokenizer files
    return str(path)


def _learner(
    model_dir: str, *, kl_coef: float = 0.0, algo: GrpoConfig | None = None, **cfg: object
) -> Learner:
    defaults: dict[str, object] = {"lr": 1e-2, "micro_batch_size": 4, "grad_clip": 1000.0}
    algo = algo or GrpoConfig(kl_coef=kl_coef)
    return Learner(model_dir, LearnerConfig(**(defaults | cfg)), algo, max_len=32)  # type: ignore[arg-type]


def _sample(seed: int, length: int, prompt: int = 3, advantage: float = 1.0) -> TrainSample:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (length,), generator=g).tolist()
    trainable = [0] * prompt + [1] * (length - prompt)
    logprobs = [0.0] * prompt + [-6.2] * (length - prompt)  # about log(1/512): a near-uniform policy
    return TrainSample(token_ids=ids, trainable=trainable, logprobs=logprobs, advantage=advantage)


def _batch() -> list[TrainSample]:
    return [_sample(i, 6 + 3 * i, advantage=(1.0, -1.0, 0.5, -0.5, 2.0)[i]) for i in range(5)]


def _weights(learner: Learner) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in learner._engine.module.state_dict().items()}


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The largest difference of any weight; either side may be on the GPU or saved to the host."""
    return max((a[k].float().cpu() - b[k].float().cpu()).abs().max().item() for k in a)


def _same_update_within(learner: Learner, cpu_bound: float) -> float:
    """How far two ways to compute one update may leave the weights apart. On the CPU, ``cpu_bound``
    (the computations agree to float32 rounding). On a GPU the kernels, and so the order of the sums,
    change with the micro-batch's shape: loss and gradient norm still agree as tightly, but Adam's first
    step moves each weight by lr x g / (|g| + eps), +-lr wherever |g| >> eps, and turns that noise
    into a few percent of lr where |g| is near eps (1.8e-4 and 5e-5 seen on an H200 at lr 1e-2). A flipped
    gradient sign moves a weight by 2 x lr either way, which 5% of lr still catches."""
    on_gpu = learner._engine.device.type != "cpu"
    return max(cpu_bound, 0.05 * learner.cfg.lr) if on_gpu else cpu_bound


def _mean_nll(learner: Learner, sample: TrainSample) -> float:
    lp = learner.sequence_logprobs([sample])[0]
    picked = [-x for x, t in zip(lp, sample.trainable, strict=True) if t]
    return sum(picked) / len(picked)


def test_train_step_changes_the_weights_and_increments_the_version(model_dir: str) -> None:
    learner = _learner(model_dir)
    before = _weights(learner)
    assert learner.version == 0
    metrics = learner.train_step(_batch())
    assert learner.version == 1
    assert _max_diff(before, _weights(learner)) > 1e-3
    expected = {
        "loss",
        "pg_loss",
        "kl",
        "clip_frac",
        "ratio_mean",
        "grad_norm",
        "tokens",
        "tokens_per_s",
        "seconds",
    }
    assert expected <= metrics.keys()
    assert metrics["tokens"] == sum(len(s.token_ids) for s in _batch())
    assert all(math.isfinite(v) for v in metrics.values())


def test_train_step_applies_exactly_one_optimizer_update_across_micro_batches(model_dir: str) -> None:
    learner = _learner(model_dir, micro_batch_size=2)  # 5 samples -> 3 micro-batches
    learner.train_step(_batch())
    steps = {int(state["step"]) for state in learner._optimizer.state.values()}
    assert steps == {1}


def test_micro_batch_size_does_not_change_the_loss_gradient_or_update(model_dir: str) -> None:
    results = []
    for micro in (1, 4):
        learner = _learner(model_dir, micro_batch_size=micro)
        results.append((learner.train_step(_batch()), _weights(learner)))
    (m1, w1), (m4, w4) = results
    assert m1["loss"] == pytest.approx(m4["loss"], rel=1e-5)
    # The pre-clip gradient norm would differ if each micro-batch were averaged on its own.
    assert m1["grad_norm"] == pytest.approx(m4["grad_norm"], rel=1e-4)
    assert m1["clip_frac"] == pytest.approx(m4["clip_frac"])
    assert _max_diff(w1, w4) < _same_update_within(learner, 1e-4)


def test_logits_only_where_a_loss_needs_them_give_the_update_of_logits_everywhere(model_dir: str) -> None:
    import functools
    from unittest import mock

    from actors import learner as learner_module

    results = []
    for every_token in (False, True):
        forward = functools.partial(learner_module.forward_logprobs, every_token=every_token)
        with mock.patch.object(learner_module, "forward_logprobs", forward):
            learner = _learner(model_dir, kl_coef=0.1)  # the reference's logprobs are kept the same way
            results.append((learner.train_step(_batch()), _weights(learner)))
    (kept, w_kept), (full, w_full) = results
    assert kept["loss"] == pytest.approx(full["loss"], rel=1e-5)
    assert kept["grad_norm"] == pytest.approx(full["grad_norm"], rel=1e-4)
    assert _max_diff(w_kept, w_full) < _same_update_within(learner, 1e-5)


def test_a_batch_with_zero_advantages_leaves_the_weights_unchanged(model_dir: str) -> None:
    learner = _learner(model_dir, weight_decay=0.0)
    before = _weights(learner)
    batch = [_sample(i, 8, advantage=0.0) for i in range(3)]
    metrics = learner.train_step(batch)
    assert metrics["grad_norm"] == 0.0
    assert learner.version == 1
    assert _max_diff(before, _weights(learner)) == 0.0


def test_samples_without_trainable_tokens_are_skipped_and_counted(model_dir: str) -> None:
    learner = _learner(model_dir)
    prompt_only = TrainSample(token_ids=[5, 6, 7], trainable=[0, 0, 0], logprobs=[0.0] * 3, advantage=1.0)
    metrics = learner.train_step([_sample(0, 8), prompt_only])
    assert metrics["skipped"] == 1.0 and metrics["samples"] == 1.0
    with pytest.raises(LearnerError, match="none of the 1 samples has a trainable token"):
        learner.train_step([prompt_only])


def test_a_sequence_longer_than_the_model_takes_is_refused_naming_the_sample(model_dir: str) -> None:
    learner = _learner(model_dir)
    with pytest.raises(LearnerError, match="sample 1 is 129 tokens long.*at most 128"):
        learner.train_step([_sample(0, 8), _sample(1, 129)])
    assert learner.version == 0


def test_a_trainable_first_token_is_refused(model_dir: str) -> None:
    learner = _learner(model_dir)
    with pytest.raises(LearnerError, match="sample 0 marks token 0 trainable"):
        learner.train_step([_sample(0, 8, prompt=0)])


def test_sequence_logprobs_match_a_plain_transformers_forward(model_dir: str) -> None:
    learner = _learner(model_dir)
    samples = [_sample(0, 5), _sample(1, 9)]
    got = learner.sequence_logprobs(samples)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    for sample, lps in zip(samples, got, strict=True):
        ids = torch.tensor([sample.token_ids])
        ref = torch.log_softmax(model(input_ids=ids).logits[0], dim=-1)
        expected = [0.0] + [ref[t - 1, ids[0, t]].item() for t in range(1, ids.shape[1])]
        assert lps == pytest.approx(expected, abs=1e-5)


def test_kl_penalty_is_zero_at_first_and_positive_once_the_policy_moved(model_dir: str) -> None:
    learner = _learner(model_dir, kl_coef=0.5)
    first = learner.train_step(_batch())
    second = learner.train_step(_batch())
    assert first["kl"] == pytest.approx(0.0, abs=1e-7)
    assert second["kl"] > 0.0
    assert second["loss"] == pytest.approx(second["pg_loss"] + 0.5 * second["kl"])
    assert _learner(model_dir)._ref is None  # no reference copy without a KL term


@pytest.mark.parametrize("zero_stage", [0, 1, 2])
def test_a_reset_optimizers_first_update_moves_every_weight_by_lr_under_each_zero_stage(
    model_dir: str, tmp_path: Path, zero_stage: int
) -> None:
    learner = _learner(model_dir, lr=1e-3, zero_stage=zero_stage)
    for i in range(3):
        learner.sft_step([_sample(10 + i, 24, prompt=8)], lr=1e-2)
    learner.reset_optimizer()
    learner.save_checkpoint(str(tmp_path / "reset"))  # a step checkpoint right after the reset
    learner.load_checkpoint(str(tmp_path / "reset"))
    before = _weights(learner)
    learner.train_step(_batch())
    moved = torch.cat([(w - before[k]).abs().flatten() for k, w in _weights(learner).items()])
    # A fresh AdamW's first step is lr * g / (|g| + eps): lr wherever the gradient is not ~0.
    assert moved.max().item() == pytest.approx(1e-3, rel=1e-4)
    assert moved[moved > 0].median().item() == pytest.approx(1e-3, rel=1e-4)


def test_the_kl_reference_is_anchored_where_rl_starts_not_before_the_warm_start(
    model_dir: str, tmp_path: Path
) -> None:
    learner = _learner(model_dir, kl_coef=0.5, lr=1e-3)
    for i in range(3):
        learner.sft_step([_sample(30 + i, 24, prompt=8)], lr=1e-2)
    assert learner.train_step(_batch())["kl"] > 1e-6  # against the model before its warm start
    learner.anchor_reference()
    assert learner.train_step(_batch())["kl"] == pytest.approx(0.0, abs=1e-7)  # against itself
    learner.save_checkpoint(str(tmp_path / "start"))
    learner.train_step(_batch())
    assert learner.train_step(_batch())["kl"] > 1e-6
    learner.anchor_reference(str(tmp_path / "start" / "hf"))  # a resumed run's: the saved start
    assert _max_diff(learner._ref.state_dict(), _weights(_learner_at(model_dir, tmp_path / "start"))) == 0.0
    _learner(model_dir).anchor_reference()  # without a KL term there is no reference to anchor


def _learner_at(model_dir: str, checkpoint: Path) -> Learner:
    learner = _learner(model_dir)
    learner.load_checkpoint(str(checkpoint))
    return learner


def test_a_second_epoch_on_one_batch_is_clipped_against_the_rollout_policy(model_dir: str) -> None:
    """``learner.epochs_per_step`` > 1 runs ``train_step`` again on the same batch (PPO-style reuse):
    its ratio is taken against the batch's rollout logprobs, not the moved policy's, so the first
    epoch (on-policy: rollout logprobs are the model's own) clips nothing and the second, once lr
    1e-2 moved the policy, does."""
    learner = _learner(model_dir)
    own = learner.sequence_logprobs(_batch())
    batch = [msgspec.structs.replace(s, logprobs=lp) for s, lp in zip(_batch(), own, strict=True)]
    first = learner.train_step(batch)
    second = learner.train_step(batch)
    assert first["clip_frac"] == 0.0
    assert second["clip_frac"] > 0.0


@pytest.mark.parametrize(
    "algo",
    [
        GrpoConfig(type="grpo"),
        GrpoConfig(type="dr_grpo"),
        GrpoConfig(type="dapo", clip_high=0.28),
        GrpoConfig(type="grpo", kl_coef=0.5, kl_estimator="k1", kl_reference="rollout"),
    ],
    ids=["grpo", "dr_grpo", "dapo", "k1-to-rollout"],
)
def test_every_grpo_family_member_is_invariant_to_the_micro_batch_size(
    model_dir: str, algo: GrpoConfig
) -> None:
    whole = _learner(model_dir, algo=algo, micro_batch_size=8).train_step(_batch())
    split = _learner(model_dir, algo=algo, micro_batch_size=2).train_step(_batch())
    assert whole["loss"] == pytest.approx(split["loss"], rel=1e-4, abs=1e-6)
    assert whole["grad_norm"] == pytest.approx(split["grad_norm"], rel=1e-3)
    assert (_learner(model_dir, algo=algo)._ref is None) == (
        algo.kl_reference == "rollout" or algo.kl_coef == 0
    )


@pytest.mark.parametrize("kind", ["grpo", "dr_grpo", "dapo"])
def test_a_packed_row_of_steps_gives_the_update_of_one_row_per_step(model_dir: str, kind: str) -> None:
    """``adoption_samples(pack=True)``'s form: one 14-token row whose two turns (tokens 4-7 and
    10-13, sequences 0 and 1) carry advantages +1 and -0.5, against the two per-step rows of the
    same tokens; under every aggregation (seq-mean weighs each step as a row)."""
    ids = _sample(7, 14).token_ids
    first, second = [0] * 4 + [1] * 4 + [0] * 6, [0] * 10 + [1] * 4
    both = [a | b for a, b in zip(first, second, strict=True)]
    logprobs = [-6.2 * t for t in both]
    steps = [
        TrainSample(token_ids=ids[:8], trainable=first[:8], logprobs=logprobs[:8], advantage=1.0),
        TrainSample(token_ids=ids, trainable=second, logprobs=[-6.2 * t for t in second], advantage=-0.5),
    ]
    packed = TrainSample(
        token_ids=ids,
        trainable=both,
        logprobs=logprobs,
        token_advantages=[1.0 * a - 0.5 * b for a, b in zip(first, second, strict=True)],
        sequences=second,  # turn 2's tokens are sequence 1, the rest 0
    )
    algo = GrpoConfig(type=kind, kl_coef=0.1, kl_reference="rollout")  # type: ignore[arg-type]
    results = []
    for batch in (steps, [packed]):
        learner = _learner(model_dir, algo=algo)
        results.append((learner.train_step(batch), _weights(learner)))
    (per_step, w_steps), (one_row, w_row) = results
    assert per_step["loss"] == pytest.approx(one_row["loss"], rel=1e-5)
    assert per_step["grad_norm"] == pytest.approx(one_row["grad_norm"], rel=1e-4)
    assert _max_diff(w_steps, w_row) < 1e-4  # Adam's first step is about lr * sign(g): 1e-2 here


def test_token_advantages_or_sequences_of_the_wrong_length_are_refused(model_dir: str) -> None:
    bad = msgspec.structs.replace(_sample(1, 6), token_advantages=[1.0] * 5)
    with pytest.raises(LearnerError, match="sample 0 has 5 token advantages for 6 token ids"):
        _learner(model_dir).train_step([bad])
    bad = msgspec.structs.replace(_sample(1, 6), sequences=[0] * 7)
    with pytest.raises(LearnerError, match="sample 0 has 7 sequence indices for 6 token ids"):
        _learner(model_dir).train_step([bad])


def test_the_aggregation_modes_weigh_sequences_as_their_papers_say(model_dir: str) -> None:
    """Sequences of 3 and 9 trainable tokens with per-token losses summing to S1 and S2 (the same
    fresh weights for every mode): token-mean = (S1 + S2) / 12, seq-mean-token-sum with L = 32 is
    (S1/32 + S2/32) / 2 = (S1 + S2) / 64, i.e. exactly 12/64 of token-mean."""
    batch = [_sample(1, 6, advantage=1.0), _sample(2, 12, advantage=1.0)]
    loss = {
        t: _learner(model_dir, algo=GrpoConfig(type=t)).train_step(batch)["pg_loss"]  # type: ignore[arg-type]
        for t in ("grpo", "dr_grpo", "dapo")
    }
    assert loss["dr_grpo"] == pytest.approx(loss["dapo"] * 12 / 64, rel=1e-4)
    assert loss["grpo"] != pytest.approx(loss["dapo"], rel=1e-3)  # each sequence weighs the same there


def _thought(seed: int, advantage: float, reasoning_advantage: float) -> TrainSample:
    """12 tokens: 3 prompt, 4 reasoning, 5 action."""
    s = _sample(seed, 12, advantage=advantage)
    reasoning = [0] * 3 + [1] * 4 + [0] * 5
    return msgspec.structs.replace(s, reasoning=reasoning, reasoning_advantage=reasoning_advantage)


def test_masked_attribution_gives_each_reward_family_only_its_own_tokens(model_dir: str) -> None:
    """With only a tool advantage, the masked update equals training the action tokens alone
    (Dr. GRPO's constant-L aggregation, so the token counts do not enter)."""
    batch = [_thought(i, (1.0, -1.0)[i % 2], 0.0) for i in range(4)]
    action_only = [
        msgspec.structs.replace(
            s, trainable=[t & (1 - r) for t, r in zip(s.trainable, s.reasoning, strict=True)], reasoning=[]
        )
        for s in batch
    ]
    masked = _learner(model_dir, algo=GrpoConfig(type="dr_grpo", attribution="masked"))
    alone = _learner(model_dir, algo=GrpoConfig(type="dr_grpo"))
    a, b = masked.train_step(batch), alone.train_step(action_only)
    assert a["pg_loss"] == pytest.approx(b["pg_loss"], rel=1e-5)
    assert _max_diff(_weights(masked), _weights(alone)) < 1e-6
    integrated = _learner(model_dir, algo=GrpoConfig(type="dr_grpo")).train_step(batch)
    assert integrated["pg_loss"] != pytest.approx(a["pg_loss"], rel=1e-3)  # reasoning tokens weighed too


def test_surgery_keeps_compatible_gradients_and_cancels_exactly_opposed_ones(model_dir: str) -> None:
    same = [_thought(i, a, a) for i, a in enumerate((1.0, -1.0, 0.5, -0.5))]
    plain, operated = _learner(model_dir), _learner(model_dir, algo=GrpoConfig(surgery=True))
    plain.train_step(same)
    compatible = operated.train_step(same)
    assert compatible["grad_cosine"] == pytest.approx(1.0, abs=1e-5) and compatible["surgery_conflict"] == 0.0
    assert _max_diff(_weights(plain), _weights(operated)) < 1e-6  # nothing projected
    learner = _learner(model_dir, algo=GrpoConfig(surgery=True))
    opposed = [_thought(i, a, -a) for i, a in enumerate((1.0, -1.0, 0.5, -0.5))]
    # Rollout logprobs = the current policy's, so every ratio is 1 and the PPO loss is linear in A:
    # the two objectives' gradients are then exactly opposite.
    opposed = [
        msgspec.structs.replace(s, logprobs=[lp * t for lp, t in zip(lps, s.trainable, strict=True)])
        for s, lps in zip(opposed, learner.sequence_logprobs(opposed), strict=True)
    ]
    before = _weights(learner)
    stats = learner.train_step(opposed)
    assert stats["grad_cosine"] == pytest.approx(-1.0, abs=1e-5) and stats["surgery_conflict"] == 1.0
    assert stats["negative_cosine_integral"] == pytest.approx(-1.0, abs=1e-5)
    assert _max_diff(before, _weights(learner)) < 1e-7  # each projected off the other: both vanish


@pytest.mark.parametrize(
    ("micro_batch_size", "kl_coef", "gradient_checkpointing"), [(4, 0.0, False), (1, 0.1, True)]
)
def test_the_surgery_update_is_policies_surgery_project_of_the_two_families_gradients(
    model_dir: str, micro_batch_size: int, kl_coef: float, gradient_checkpointing: bool
) -> None:
    """By hand: each family's gradient from a plain learner's loss with the other family's advantage
    zeroed, projected with ``policies.surgery.project``, summed, plus the KL term's gradient, one
    optimizer step: the same weights, in one micro-batch or four, with activations recomputed or not."""
    pairs = ((1.0, -1.0), (-1.0, 0.5), (0.5, -1.0), (-0.5, 1.0))  # (tool, reasoning) advantages
    batch = [_thought(i, tool, reasoning) for i, (tool, reasoning) in enumerate(pairs)]
    settings = {"micro_batch_size": micro_batch_size, "gradient_checkpointing": gradient_checkpointing}
    # KL to the rollout policy: against the base model it (and its gradient) would be 0 at step 0.
    kl = {"kl_coef": kl_coef, "kl_reference": "rollout"}
    operated = _learner(model_dir, algo=GrpoConfig(surgery=True, **kl), **settings)  # type: ignore[arg-type]
    stats = operated.train_step(batch)

    by_hand = _learner(model_dir, algo=GrpoConfig(**kl), **settings)  # type: ignore[arg-type]
    params = [p for p in by_hand._engine.module.parameters() if p.requires_grad]
    loss = policy_loss(
        by_hand.algo, by_hand.max_len, by_hand._policy, None, ("adv_reasoning", "adv_tool"), kl=False
    )
    family = {}
    for name, zeroed in (("reasoning", "advantage"), ("tool", "reasoning_advantage")):
        alone = [msgspec.structs.replace(s, **{zeroed: 0.0}) for s in batch]
        by_hand._accumulate(alone, "by hand", loss)
        family[name] = flatten_grads(params)
    assert -0.99 < cosine(family["reasoning"], family["tool"]) < -0.1  # conflicting, not opposite
    assert stats["grad_cosine"] == pytest.approx(cosine(family["reasoning"], family["tool"]), abs=1e-5)
    projected_r, projected_t = project(family["reasoning"], family["tool"])
    update = projected_r + projected_t
    if kl_coef:
        shared = kl_loss(by_hand.algo, by_hand.max_len, by_hand._policy, by_hand._reference())
        assert stats["kl"] == pytest.approx(by_hand._accumulate(batch, "by hand", shared)["kl"], rel=1e-5)
        assert stats["kl"] > 1e-3
        update = update + flatten_grads(params)
    assign_grads(params, update)
    by_hand._optimizer_step()
    assert _max_diff(_weights(operated), _weights(by_hand)) < 1e-6

    plain = _learner(model_dir)
    plain.train_step(batch)  # the plain sum of the two gradients moves the weights elsewhere
    assert _max_diff(_weights(operated), _weights(plain)) > 1e-4


def test_a_surgery_step_runs_one_forward_per_micro_batch(model_dir: str) -> None:
    """The families' (and the KL term's) losses share each micro-batch's forward: their backward
    passes reuse its graph instead of computing the policy's logprobs once per loss."""
    learner = _learner(model_dir, algo=GrpoConfig(surgery=True, kl_coef=0.1), micro_batch_size=2)
    forward, calls = learner._policy, []

    def counted(batch: Batch) -> torch.Tensor:
        calls.append(batch)
        return forward(batch)

    learner._policy = counted  # type: ignore[method-assign]
    learner.train_step([_thought(i, (1.0, -1.0)[i % 2], (0.5, -0.5)[i // 2]) for i in range(4)])
    assert len(calls) == 2


def test_surgery_refuses_partitioned_or_bf16_gradients(model_dir: str) -> None:
    learner = _learner(model_dir, algo=GrpoConfig(surgery=True), zero_stage=1)
    with pytest.raises(LearnerError, match="zero_stage 0"):
        learner.train_step(_batch())


def test_export_weights_writes_an_untied_lm_head_equal_to_the_embeddings(
    model_dir: str, tmp_path: Path
) -> None:
    learner = _learner(model_dir)
    learner.train_step(_batch())
    path = learner.export_weights(str(tmp_path / "w" / "policy.safetensors"))
    weights = load_file(path)
    assert torch.equal(weights["lm_head.weight"], weights["model.embed_tokens.weight"])
    assert weights["lm_head.weight"].data_ptr() != weights["model.embed_tokens.weight"].data_ptr()
    assert all(t.dtype == torch.float32 and t.is_contiguous() for t in weights.values())
    assert _max_diff(_weights(learner), weights) == 0.0


def test_a_train_step_runs_at_the_learning_rate_it_is_given_then_the_configured_one_again(
    model_dir: str,
) -> None:
    """The driver's schedule (``learner.lr_at``) reaches the optimizer one update at a time: at lr 0
    AdamW leaves the weights where they were (the update still counts), then ``cfg.lr`` is back."""
    learner = _learner(model_dir)
    before = _weights(learner)
    metrics = learner.train_step(_batch(), lr=0.0)
    assert metrics["lr"] == 0.0 and learner.version == 1
    assert _max_diff(before, _weights(learner)) == 0.0
    assert learner.train_step(_batch())["lr"] == 1e-2
    assert _max_diff(before, _weights(learner)) > 1e-4
    assert {g["lr"] for g in learner._optimizer.param_groups} == {1e-2}
    with pytest.raises(LearnerError, match="learning rate nan; expected a finite number >= 0"):
        learner.train_step(_batch(), lr=float("nan"))


def test_sft_step_lowers_the_nll_of_a_demonstration(model_dir: str) -> None:
    learner = _learner(model_dir, lr=1e-6, gradient_checkpointing=True)
    demo = _sample(7, 24, prompt=8)
    before = _mean_nll(learner, demo)
    for _ in range(5):
        metrics = learner.sft_step([demo], lr=1e-2)
    assert metrics["lr"] == 1e-2
    assert _mean_nll(learner, demo) < before - 1.0
    assert learner.version == 5
    assert {g["lr"] for g in learner._optimizer.param_groups} == {1e-6}  # the RL lr is back


def test_after_reset_optimizer_the_next_update_is_a_fresh_optimizers_first(model_dir: str) -> None:
    warm = _learner(model_dir, lr=1e-3)
    for i in range(3):  # a warm start: its moments point at the demonstrations
        warm.sft_step([_sample(10 + i, 24, prompt=8)], lr=1e-2)
    kept = _learner(model_dir, lr=1e-3)
    kept._engine.module.load_state_dict(_weights(warm))
    kept._optimizer.load_state_dict(warm._optimizer.state_dict())
    fresh = _learner(model_dir, lr=1e-3)
    fresh._engine.module.load_state_dict(_weights(warm))

    warm.reset_optimizer()
    assert warm.version == 3 and not warm._optimizer.state
    for learner in (warm, kept, fresh):
        learner.train_step(_batch())
    assert _max_diff(_weights(warm), _weights(fresh)) == 0.0
    assert _max_diff(_weights(kept), _weights(fresh)) > 1e-4  # the moments it kept moved it elsewhere
    assert {int(s["step"]) for s in warm._optimizer.state.values()} == {1}


def test_checkpoint_round_trip_restores_version_weights_optimizer_and_rng(
    model_dir: str, tmp_path: Path
) -> None:
    learner = _learner(model_dir)
    learner.train_step(_batch())
    saved = _weights(learner)
    learner.save_checkpoint(str(tmp_path / "ckpt"))
    draw = torch.rand(4)  # the RNG stream right after the checkpoint
    learner.train_step(_batch())
    assert _max_diff(saved, _weights(learner)) > 1e-3
    continued = _weights(learner)

    fresh = _learner(model_dir)
    fresh.load_checkpoint(str(tmp_path / "ckpt"))
    assert torch.equal(torch.rand(4), draw)
    assert fresh.version == 1
    assert _max_diff(saved, _weights(fresh)) == 0.0
    assert {int(s["step"]) for s in fresh._optimizer.state.values()} == {1}
    # Resuming continues exactly: the same next step gives the same weights (optimizer moments too).
    fresh.train_step(_batch())
    assert _max_diff(continued, _weights(fresh)) == 0.0 and fresh.version == 2

    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path / "ckpt" / "hf"), dtype=torch.float32)
    assert _max_diff(saved, hf.state_dict()) == 0.0
    assert (tmp_path / "ckpt" / "hf" / "chat_template.jinja").exists()


def test_loading_from_a_directory_without_a_checkpoint_is_an_error(model_dir: str, tmp_path: Path) -> None:
    learner = _learner(model_dir)
    with pytest.raises(LearnerError, match="no DeepSpeed checkpoint in"):
        learner.load_checkpoint(str(tmp_path))


def test_an_unknown_dtype_is_refused(model_dir: str) -> None:
    with pytest.raises(LearnerError, match="dtype 'float16'"):
        Learner(model_dir, LearnerConfig(), GrpoConfig(), dtype="float16")


def test_importing_the_learner_module_does_not_import_deepspeed_or_ray() -> None:
    import subprocess
    import sys

    code = "import sys, actors.learner; print('deepspeed' in sys.modules or 'ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_remote_learner_wraps_the_plain_class_as_a_ray_actor_with_or_without_options() -> None:
    pytest.importorskip("ray")  # installed wherever `make test` runs; absent on a bare GPU machine
    from actors.learner import remote_learner

    for actor_class in (remote_learner(), remote_learner(num_cpus=1)):
        assert callable(actor_class.remote)
        assert actor_class.__ray_metadata__.modified_class.__name__ == "Learner"


def test_token_ids_outside_the_vocabulary_are_refused_naming_the_sample(model_dir: str) -> None:
    learner = _learner(model_dir)
    bad = TrainSample(token_ids=[1, VOCAB], trainable=[0, 1], logprobs=[0.0, -1.0])
    with pytest.raises(LearnerError, match=rf"sample 1 has token ids outside \[0, {VOCAB}\)"):
        learner.train_step([_sample(0, 8), bad])


def test_a_step_that_fails_midway_leaves_no_gradient_behind(
    model_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = _learner(model_dir, micro_batch_size=1)
    collate = broken._collate
    calls = iter(range(100))

    def fail_on_third_micro_batch(chunk: list[TrainSample]) -> dict[str, torch.Tensor]:
        if next(calls) == 2:
            raise RuntimeError("simulated failure in micro-batch 2")
        return collate(chunk)

    monkeypatch.setattr(broken, "_collate", fail_on_third_micro_batch)
    with pytest.raises(RuntimeError, match="simulated"):
        broken.train_step(_batch())
    monkeypatch.undo()
    assert broken.version == 0
    clean = _learner(model_dir, micro_batch_size=1)
    assert broken.train_step(_batch())["grad_norm"] == pytest.approx(
        clean.train_step(_batch())["grad_norm"], rel=1e-5
    )
