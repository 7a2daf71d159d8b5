"""The Learner: a HF causal LM on a DeepSpeed engine, trained with GRPO or a supervised warm start.

Contract (what the driver and the Generator rely on):

- ``Learner(model_path, cfg, algo, dtype=..., seed=...)`` loads the model directory in ``dtype``:
  a causal LM, or a vision-language model (``policies.vision.is_multimodal``: HF's
  ``AutoModelForImageTextToText``), whose samples' images go through its forward as the model's
  own processor turns them into pixels (``actors.learner_batch.collate``).
- ``train_step(samples, lr=None)`` and ``sft_step(samples, lr=None)`` each apply exactly ONE
  optimizer update (at ``lr`` when given, else ``cfg.lr``) and increment ``version``. The step's
  samples are checked and cut into micro-batches of ``cfg.micro_batch_size`` right-padded
  sequences (``actors.learner_batch``); every micro-batch's loss is a *sum* scaled by 1 /
  (trainable tokens of the whole step, or its number of sequences, as the aggregation wants), so
  the accumulated gradient is the step's token-mean / sequence-mean whatever the micro-batch size
  (DeepSpeed runs with ``managed_gradient_accumulation=false``: backward only accumulates,
  ``step()`` is the boundary, clipping included).
- GRPO-family loss (``actors.learner_losses``): PPO-clip (asymmetric ``clip_low``/``clip_high``) of
  the current policy against the samples' *rollout* logprobs (the policy that sampled them), each
  reward family's sequence advantage broadcast over its tokens (``algo.attribution``), aggregated as
  ``algo.aggregation`` (token-mean, seq-mean-token-mean, seq-mean-token-sum with ``L = max_len``),
  plus ``kl_coef`` x KL (k1 or k3) to a frozen copy of the base model (built only then) or to the
  rollout-time policy.
- Gradient surgery (``algo.surgery``, ZeRO-0 and float32 only): the reasoning and the tool family's
  gradients are computed apart (from one forward per micro-batch, a backward each) and projected by
  ``policies.surgery.project`` (paper 000, eq. 11) before the one update; the KL term's gradient is
  added unprojected.
- ``anchor_reference(hf_dir=None)`` makes the KL reference model the current policy (or a
  saved one): the policy RL starts from, once the warm start is done.
- ``reset_optimizer()`` forgets AdamW's moments and step count (the weights and ``version`` stay):
  the next update is a fresh optimizer's first, as when RL starts after a warm start in a
  two-stage recipe.
- ``export_weights(path)`` writes a safetensors file for vLLM with ``lm_head.weight`` present as its
  own tensor even when tied; checkpoints are ``actors.learner_checkpoint``'s.

Not here: ``cfg.epochs_per_step`` (the driver calls ``train_step`` that many times on one batch,
the PPO ratio then measures the drift from the rollout policy), the learning-rate schedule (the
driver passes each step's ``cfg.lr_at(step)``, so no scheduler state lives here), and
multi-rank data parallelism (one process, world size 1; ZeRO stages still apply). Heavy imports
(torch, transformers, deepspeed, ray) happen inside methods so that importing this module, and
the launcher's ``--help``, stays instant.
"""

from __future__ import annotations

import contextlib
import math
import operator
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from actors import learner_checkpoint
from actors.dist_env import init_single_process_dist
from actors.learner_batch import Batch, LearnerError, chunks, collate, sequence_count, validate
from actors.learner_losses import Forward, MicroLoss, forward_logprobs, kl_loss, policy_loss, supervised_loss
from policies.types import TrainSample

if TYPE_CHECKING:
    import torch

    from specs.algorithm import GrpoConfig
    from specs.config import LearnerConfig

_DTYPES = ("float32", "bfloat16")


class Learner:
    """Owns the policy weights and the optimizer; see the module docstring for the contract."""

    def __init__(
        self,
        model_path: str,
        cfg: LearnerConfig,
        algo: GrpoConfig,
        *,
        dtype: str = "float32",
        seed: int = 0,
        max_len: int = 1024,
    ) -> None:
        """``max_len``: Dr. GRPO's constant ``L`` for the ``seq-mean-token-sum`` aggregation (the
        rollout's context budget)."""
        import copy

        import deepspeed
        import torch
        from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

        from policies.vision import load_vision

        if dtype not in _DTYPES:
            raise LearnerError(f"Learner: dtype {dtype!r} for {model_path}; expected one of {_DTYPES}")
        self.cfg, self.algo, self.model_path, self.dtype = cfg, algo, model_path, dtype
        self.max_len = max_len
        from policies.surgery import ConflictTracker

        self._conflicts = ConflictTracker()
        self._version = 0
        torch.manual_seed(seed)
        torch_dtype = getattr(torch, dtype)
        self._vision = load_vision(model_path)
        auto = AutoModelForCausalLM if self._vision is None else AutoModelForImageTextToText
        model = auto.from_pretrained(model_path, dtype=torch_dtype)
        model.config.use_cache = False
        text_config = model.config.get_text_config()
        self.max_seq_len: int | None = getattr(text_config, "max_position_embeddings", None)
        self.vocab_size = int(text_config.vocab_size)
        if cfg.gradient_checkpointing:
            # Non-reentrant checkpointing needs no requires_grad on the inputs and works under ZeRO.
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self._ref: Any = None
        if algo.needs_reference_model:
            self._ref = copy.deepcopy(model).eval().requires_grad_(False)

        init_single_process_dist("gloo" if not torch.cuda.is_available() else "nccl")
        # A plain torch AdamW: DeepSpeed's fused/CPU Adam ops need a compiler toolchain or a GPU.
        self._optimizer = torch.optim.AdamW(
            model.parameters(), lr=cfg.lr, betas=(cfg.betas[0], cfg.betas[1]), weight_decay=cfg.weight_decay
        )
        ds_config = {
            "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
            "gradient_accumulation_steps": 1,
            "managed_gradient_accumulation": False,
            "gradient_clipping": cfg.grad_clip,
            "zero_optimization": {"stage": cfg.zero_stage},
            "bf16": {"enabled": dtype == "bfloat16"},
            "steps_per_print": 2**31 - 1,
        }
        self._engine, _, _, _ = deepspeed.initialize(model=model, optimizer=self._optimizer, config=ds_config)
        if self._ref is not None:
            self._ref.to(self._engine.device)

    @property
    def version(self) -> int:
        """Number of optimizer updates applied since the base model (restored by ``load_checkpoint``)."""
        return self._version

    def get_version(self) -> int:
        """``version`` as a method, for callers that reach the learner through a Ray actor handle."""
        return self._version

    # -- updates ----------------------------------------------------------------------------------

    def anchor_reference(self, hf_dir: str | None = None) -> None:
        """Make the KL reference (``algo.kl_reference: base``) the current policy, or the model
        saved in ``hf_dir`` (a checkpoint's ``hf``): the driver anchors it where RL starts, after
        the warm start, so that the KL term holds RL near the policy it started from rather than
        near the model before its warm start. Nothing to do without a reference model."""
        if self._ref is None:
            return
        if hf_dir is None:
            state = learner_checkpoint.full_state_dict(self._engine.module, self.cfg.zero_stage)
        else:
            state = type(self._ref).from_pretrained(hf_dir, dtype=self._ref.dtype).state_dict()
        self._ref.load_state_dict(state)

    def reset_optimizer(self) -> None:
        """Forget AdamW's moments and step count; weights and ``version`` stay. Every ZeRO stage and
        the bf16 wrapper step this one torch optimizer, whose state is built again on the next step."""
        self._optimizer.state.clear()

    def train_step(self, samples: list[TrainSample], lr: float | None = None) -> dict[str, float]:
        """One update of the GRPO family on ``samples`` at ``lr`` (default ``cfg.lr``): PPO-clip
        against the rollout logprobs, aggregated by ``algo.aggregation``, plus ``kl_coef`` x KL
        (``algo.kl_estimator``) to the base model or the rollout-time policy
        (``algo.kl_reference``). The per-token advantage is the reasoning family's plus the tool
        family's, each on its tokens (``algo.attribution``); with ``algo.surgery`` their two
        gradients are projected (``policies/surgery.py``) first."""
        with self._learning_rate(lr) as used:
            if self.algo.surgery:
                metrics = self._surgery_step(samples)
            else:
                streams = ("adv_reasoning", "adv_tool")
                loss = policy_loss(self.algo, self.max_len, self._policy, self._reference(), streams, kl=True)
                metrics = self._update(samples, "train_step", loss)
        return metrics | {"lr": used}

    # -- batches and forwards ---------------------------------------------------------------------

    def _validate(self, samples: Sequence[TrainSample], where: str, *, scored: bool = True) -> None:
        validate(
            samples,
            where,
            model_path=self.model_path,
            max_seq_len=self.max_seq_len,
            vocab_size=self.vocab_size,
            scored=scored,
            multimodal=self._vision is not None,
        )

    def _collate(self, samples: Sequence[TrainSample]) -> Batch:
        return collate(samples, self.algo.attribution, self._engine.device, self._vision)

    def _policy(self, batch: Batch) -> torch.Tensor:
        return forward_logprobs(self._engine, batch)

    def _reference(self) -> Forward | None:
        """The KL reference's logprobs: the frozen reference model's (the base model, or the policy
        ``anchor_reference`` kept), or ``None`` for the rollout policy's."""
        ref = self._ref
        return None if ref is None else lambda batch: forward_logprobs(ref, batch)

    def _surgery_step(self, samples: list[TrainSample]) -> dict[str, float]:
        """Bidirectional gradient surgery (paper 000, §3.3.3, eq. 11): each reward family's gradient
        on the shared parameters, projected by ``policies.surgery.project``, summed, plus the KL
        term's gradient (shared, never projected), one update. The losses share one forward per
        micro-batch (``_accumulate_apart``)."""
        from policies.surgery import assign_grads, gram, project

        if self.cfg.zero_stage != 0 or self.dtype == "bfloat16":
            raise LearnerError(
                "algorithm.surgery needs learner.zero_stage 0 and float32 weights (the two objectives' "
                f"gradients are read from the parameters' .grad); got zero_stage {self.cfg.zero_stage}, {self.dtype}"
            )
        forward = _LastForward(self._policy)
        losses = {
            name: policy_loss(self.algo, self.max_len, forward, None, (f"adv_{name}",), kl=False)
            for name in ("reasoning", "tool")
        }
        if self.algo.kl_coef > 0:
            losses["kl"] = kl_loss(self.algo, self.max_len, forward, self._reference())
        grads, parts = self._accumulate_apart(samples, "train_step", losses)
        metrics = parts["reasoning"] | {
            f"pg_loss_{name}": parts[name]["pg_loss"] for name in ("reasoning", "tool")
        }
        metrics["pg_loss"] = metrics["pg_loss_reasoning"] + metrics["pg_loss_tool"]
        metrics["loss"] = metrics["pg_loss"]  # the ratio statistics are the same for both families
        pair = gram(grads["reasoning"], grads["tool"])
        projected_r, projected_t = project(grads["reasoning"], grads["tool"], pair=pair)
        update = projected_r + projected_t
        if "kl" in grads:
            metrics["kl"] = parts["kl"]["kl"]
            metrics["loss"] += self.algo.kl_coef * parts["kl"]["kl"]
            update = update + grads["kl"]
        assign_grads(self._trained_params(), update)
        conflict = self._conflicts.update(pair.cosine)
        metrics["grad_norm"] = self._optimizer_step()
        return metrics | conflict | {"surgery_conflict": float(pair.conflict)}

    def sft_step(self, samples: list[TrainSample], lr: float | None = None) -> dict[str, float]:
        """One supervised update: mean NLL of the trainable tokens; ``lr`` overrides the RL lr for this step."""
        with self._learning_rate(lr) as used:
            metrics = self._update(samples, "sft_step", supervised_loss(self._policy))
        return metrics | {"lr": used}

    @contextlib.contextmanager
    def _learning_rate(self, lr: float | None) -> Iterator[float]:
        """Every parameter group at ``lr`` (``cfg.lr`` when ``None``) for one update, then as before."""
        groups = self._optimizer.param_groups
        saved = [g["lr"] for g in groups]
        used = self.cfg.lr if lr is None else lr
        if not 0 <= used < math.inf:  # written so that NaN fails too
            raise LearnerError(f"Learner: learning rate {used!r}; expected a finite number >= 0")
        try:
            for g in groups:
                g["lr"] = used
            yield used
        finally:
            for g, value in zip(groups, saved, strict=True):
                g["lr"] = value

    # -- accumulation and the update --------------------------------------------------------------

    def _update(
        self,
        samples: Sequence[TrainSample],
        where: str,
        micro_loss: MicroLoss,
    ) -> dict[str, float]:
        """Accumulate ``micro_loss`` over the micro-batches, then the step's single optimizer update.

        ``micro_loss(batch, total, rows)`` returns the micro-batch loss (already divided by the step's
        trainable-token count ``total``, or its number of sequences ``rows``, as its aggregation
        wants) and metrics that add up over micro-batches (``*_max`` ones take the maximum).
        """
        start = time.perf_counter()
        sums = self._accumulate(samples, where, micro_loss)
        sums["grad_norm"] = self._optimizer_step()
        seconds = time.perf_counter() - start
        return sums | {"tokens_per_s": sums["tokens"] / seconds if seconds > 0 else 0.0, "seconds": seconds}

    def _accumulate(
        self,
        samples: Sequence[TrainSample],
        where: str,
        micro_loss: MicroLoss,
    ) -> dict[str, float]:
        """Backward of ``micro_loss`` over every micro-batch into fresh ``.grad``s (no update)."""
        active, total, rows = self._active(samples, where)
        sums: dict[str, float] = {}
        self._engine.train()
        self._engine.optimizer.zero_grad()
        try:
            for chunk in chunks(active, self.cfg.micro_batch_size):
                loss, parts = micro_loss(self._collate(chunk), total, rows)
                self._engine.backward(loss, scale_wrt_gas=False)
                _add_parts(sums, parts)
        except BaseException:
            # A failed micro-batch must not leave half a step's gradients for the next step.
            self._engine.optimizer.zero_grad()
            raise
        return sums | self._counts(samples, active, total)

    def _accumulate_apart(
        self,
        samples: Sequence[TrainSample],
        where: str,
        losses: dict[str, MicroLoss],
    ) -> tuple[dict[str, torch.Tensor], dict[str, dict[str, float]]]:
        """Each of ``losses``' gradient over every micro-batch, kept apart (flat, ``flatten_grads``'
        layout), and each one's summed metrics; ``.grad`` is left empty (no update). Losses built on
        one ``_LastForward`` share each micro-batch's forward: the graph is kept for the next loss's
        backward, and each loss accumulates into its own ``.grad`` tensors, swapped in for its backward."""
        from policies.surgery import flatten_grads

        active, total, rows = self._active(samples, where)
        params = self._trained_params()
        stores: dict[str, list[torch.Tensor | None]] = {name: [None] * len(params) for name in losses}
        sums: dict[str, dict[str, float]] = {name: {} for name in losses}
        last = len(losses) - 1
        self._engine.train()
        self._engine.optimizer.zero_grad()
        try:
            for chunk in chunks(active, self.cfg.micro_batch_size):
                batch = self._collate(chunk)
                for i, (name, micro_loss) in enumerate(losses.items()):
                    for p, grad in zip(params, stores[name], strict=True):
                        p.grad = grad
                    loss, parts = micro_loss(batch, total, rows)
                    self._engine.backward(loss, retain_graph=i < last, scale_wrt_gas=False)
                    stores[name] = [p.grad for p in params]
                    _add_parts(sums[name], parts)
            grads = {}
            for name in losses:
                for p, grad in zip(params, stores.pop(name), strict=True):
                    p.grad = grad
                grads[name] = flatten_grads(params)
                self._engine.optimizer.zero_grad()
        finally:
            self._engine.optimizer.zero_grad()
        counts = self._counts(samples, active, total)
        return grads, {name: parts | counts for name, parts in sums.items()}

    def _active(self, samples: Sequence[TrainSample], where: str) -> tuple[list[TrainSample], float, float]:
        """The step's samples with a trainable token (checked first), and the two loss denominators:
        their trainable-token count and their number of sequences."""
        self._validate(samples, where)
        active = [s for s in samples if any(s.trainable)]
        if not active:
            raise LearnerError(
                f"{where}: none of the {len(samples)} samples has a trainable token; nothing to train"
            )
        return active, float(sum(sum(s.trainable) for s in active)), float(sequence_count(active))

    @staticmethod
    def _counts(
        samples: Sequence[TrainSample], active: Sequence[TrainSample], total: float
    ) -> dict[str, float]:
        return {
            "tokens": float(sum(len(s.token_ids) for s in active)),
            "trainable_tokens": total,
            "samples": float(len(active)),
            "skipped": float(len(samples) - len(active)),
        }

    def _trained_params(self) -> list[torch.nn.Parameter]:
        return [p for p in self._engine.module.parameters() if p.requires_grad]

    def _optimizer_step(self) -> float:
        """The step's single optimizer update (DeepSpeed clips first); returns the pre-clip grad norm."""
        import torch

        grads = [p.grad for p in self._engine.module.parameters() if p.grad is not None]
        local = float(torch.nn.utils.get_total_norm(grads)) if grads else float("nan")
        self._engine.step()
        self._version += 1
        # ZeRO and the bf16 optimizer compute the norm themselves (grads are not in .grad there).
        reported = self._engine.get_global_grad_norm()
        return float(reported) if reported is not None else local

    # -- inspection -------------------------------------------------------------------------------

    def sequence_logprobs(self, samples: list[TrainSample]) -> list[list[float]]:
        """Current-policy logprob of every token given its prefix (position 0 gets 0.0); no gradient."""
        import torch

        self._validate(samples, "sequence_logprobs", scored=False)
        out: list[list[float]] = []
        self._engine.eval()
        with torch.no_grad():
            for chunk in chunks(samples, self.cfg.micro_batch_size):
                lp = forward_logprobs(self._engine, self._collate(chunk), every_token=True).cpu()
                out.extend(lp[row, : len(s.token_ids)].tolist() for row, s in enumerate(chunk))
        self._engine.train()
        return out

    # -- weights out ------------------------------------------------------------------------------

    def export_weights(self, path: str) -> str:
        """Write the full state dict as safetensors at ``path`` (atomically, via a rename); returns ``path``."""
        state = learner_checkpoint.full_state_dict(self._engine.module, self.cfg.zero_stage)
        return learner_checkpoint.export_weights(state, path, self._version)

    def save_checkpoint(self, dir: str) -> None:
        """DeepSpeed checkpoint (weights, optimizer, version, RNG) in ``dir``, plus a loadable HF model
        in ``dir/hf``. No scheduler state: the driver passes each step's lr."""
        learner_checkpoint.save_checkpoint(
            self._engine, dir, self._version, self.cfg.zero_stage, self.model_path
        )

    def load_checkpoint(self, dir: str) -> None:
        """Restore weights, optimizer state, RNG and ``version`` from the latest DeepSpeed checkpoint in ``dir``."""
        self._version = learner_checkpoint.load_checkpoint(self._engine, dir)


def remote_learner(**ray_options: Any) -> Any:
    """The Ray actor class for ``Learner`` (created lazily so importing this module never imports ray)."""
    from actors.remote import remote_class

    return remote_class(Learner, **ray_options)


class _LastForward:
    """``forward`` remembered for the last batch it was called on, so that several losses of one
    micro-batch share its forward and graph (``Learner._accumulate_apart``)."""

    def __init__(self, forward: Forward) -> None:
        self._forward = forward
        self._batch: Batch | None = None
        self._out: torch.Tensor | None = None

    def __call__(self, batch: Batch) -> torch.Tensor:
        if batch is not self._batch or self._out is None:
            self._batch, self._out = batch, self._forward(batch)
        return self._out


def _add_parts(sums: dict[str, float], parts: dict[str, float]) -> None:
    """Add a micro-batch's metrics into the step's (``*_max`` ones take the maximum)."""
    for key, value in parts.items():
        combine = max if key.endswith("_max") else operator.add
        sums[key] = combine(sums[key], value) if key in sums else value
