"""The Learner: a HF causal LM on a DeepSpeed engine, trained with GRPO or a supervised warm start.

Contract (what the driver and the Generator rely on):

- ``Learner(model_path, cfg, algo, dtype=..., seed=...)`` loads the model directory in ``dtype``.
- ``train_step(samples)`` and ``sft_step(samples)`` each apply exactly ONE optimizer update and
  increment ``version``. The step's samples are cut into micro-batches of ``cfg.micro_batch_size``
  right-padded sequences; every micro-batch's loss is a *sum* scaled by 1 / (trainable tokens of
  the whole step, or its number of sequences, as the aggregation wants), so the accumulated
  gradient is the step's token-mean / sequence-mean whatever the micro-batch size (DeepSpeed runs
  with ``managed_gradient_accumulation=false``: backward only accumulates, ``step()`` is the
  boundary, clipping included).
- GRPO-family loss: PPO-clip (asymmetric ``clip_low``/``clip_high``) of the current policy against
  the samples' *rollout* logprobs (the policy that sampled them), the sequence advantage broadcast
  over its trainable tokens, aggregated as ``algo.aggregation`` (token-mean, seq-mean-token-mean,
  seq-mean-token-sum with ``L = max_len``), plus ``kl_coef`` x KL (k1 or k3) to a frozen copy of
  the base model (built only then) or to the rollout-time policy.
- ``export_weights(path)`` writes a safetensors file for vLLM with ``lm_head.weight`` present as its
  own tensor even when tied (MACHINE_NOTES, "tied embeddings trap").

Not here: ``cfg.epochs_per_step`` (the driver calls ``train_step`` that many times on one batch,
the PPO ratio then measures the drift from the rollout policy), learning-rate schedules, gradient
surgery, and multi-rank data parallelism (one process, world size 1; ZeRO stages still apply).
Heavy imports (torch, transformers, deepspeed, ray) happen inside methods so that importing this
module, and the launcher's ``--help``, stays instant.
"""

from __future__ import annotations

import operator
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from actors.dist_env import init_single_process_dist
from policies.types import TrainSample
from specs.errors import MCPRLError

if TYPE_CHECKING:
    import torch

    from specs.config import GrpoConfig, LearnerConfig

_DTYPES = ("float32", "bfloat16")
# Files of a model directory that are weights; everything else (tokenizer, chat template,
# generation config) is copied next to the HF export of a checkpoint so it loads on its own.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf", ".index.json")


class LearnerError(MCPRLError):
    """A batch, dtype or checkpoint the learner cannot use."""


def _chunks(items: Sequence[TrainSample], size: int) -> Iterator[Sequence[TrainSample]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _grad(p: torch.nn.Parameter) -> torch.Tensor:
    import torch

    return p.grad.detach() if p.grad is not None else torch.zeros_like(p)


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
        from transformers import AutoModelForCausalLM

        if dtype not in _DTYPES:
            raise LearnerError(f"Learner: dtype {dtype!r} for {model_path}; expected one of {_DTYPES}")
        self.cfg, self.algo, self.model_path, self.dtype = cfg, algo, model_path, dtype
        self.max_len = max_len
        from policies.surgery import ConflictTracker

        self._conflicts = ConflictTracker()
        self._version = 0
        torch.manual_seed(seed)
        torch_dtype = getattr(torch, dtype)
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch_dtype)
        model.config.use_cache = False
        self.max_seq_len: int | None = getattr(model.config, "max_position_embeddings", None)
        self.vocab_size = int(model.config.vocab_size)
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

    # -- batching ---------------------------------------------------------------------------------

    def _validate(self, samples: Sequence[TrainSample], where: str, *, scored: bool = True) -> None:
        """Refuse, naming the sample, what cannot be batched (or, when ``scored``, trained on)."""
        for i, s in enumerate(samples):
            n = len(s.token_ids)
            if n == 0 or len(s.trainable) != n or len(s.logprobs) != n:
                raise LearnerError(
                    f"{where}: sample {i} has {n} token ids, {len(s.trainable)} trainable flags and "
                    f"{len(s.logprobs)} logprobs; expected equal non-zero lengths"
                )
            if self.max_seq_len is not None and n > self.max_seq_len:
                raise LearnerError(
                    f"{where}: sample {i} is {n} tokens long; the model {self.model_path} takes at most "
                    f"{self.max_seq_len} (max_position_embeddings)"
                )
            if self.vocab_size and not 0 <= min(s.token_ids) <= max(s.token_ids) < self.vocab_size:
                raise LearnerError(
                    f"{where}: sample {i} has token ids outside [0, {self.vocab_size}), the vocabulary of "
                    f"{self.model_path}"
                )
            if scored and s.trainable[0]:
                raise LearnerError(
                    f"{where}: sample {i} marks token 0 trainable; the first token has no prefix to score it"
                )

    def _collate(self, samples: Sequence[TrainSample]) -> dict[str, torch.Tensor]:
        """Right-pad to the longest sequence; pads are masked out of attention and of the loss."""
        import torch

        width = max(len(s.token_ids) for s in samples)
        ids = torch.zeros(len(samples), width, dtype=torch.long)
        attn = torch.zeros(len(samples), width, dtype=torch.long)
        mask = torch.zeros(len(samples), width, dtype=torch.float32)
        old = torch.zeros(len(samples), width, dtype=torch.float32)
        reasoning = torch.zeros(len(samples), width, dtype=torch.float32)
        for row, s in enumerate(samples):
            n = len(s.token_ids)
            ids[row, :n] = torch.tensor(s.token_ids)
            attn[row, :n] = 1
            mask[row, :n] = torch.tensor(s.trainable, dtype=torch.float32)
            old[row, :n] = torch.tensor(s.logprobs, dtype=torch.float32)
            if s.reasoning:
                reasoning[row, :n] = torch.tensor(s.reasoning, dtype=torch.float32)
        adv_tool = torch.tensor([s.advantage for s in samples], dtype=torch.float32).unsqueeze(-1)
        adv_reason = torch.tensor([s.reasoning_advantage for s in samples], dtype=torch.float32).unsqueeze(-1)
        # Per-token advantage of each reward family (paper 000, eqs. 9-10): integrated, both on
        # every generated token; masked, reasoning advantages on reasoning tokens, tool advantages
        # on the action tokens (generated tokens outside the reasoning spans).
        if self.algo.attribution == "masked":
            reason_tokens, action_tokens = mask * reasoning, mask * (1 - reasoning)
        else:
            reason_tokens, action_tokens = mask, mask
        tensors = {
            "ids": ids,
            "attn": attn,
            "mask": mask,
            "old": old,
            "adv_reasoning": adv_reason * reason_tokens,
            "adv_tool": adv_tool * action_tokens,
        }
        return {k: v.to(self._engine.device) for k, v in tensors.items()}

    def _logprobs(self, model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        from policies.losses import token_logprobs

        logits = model(input_ids=batch["ids"], attention_mask=batch["attn"], use_cache=False).logits
        return token_logprobs(logits, batch["ids"])

    # -- updates ----------------------------------------------------------------------------------

    def train_step(self, samples: list[TrainSample]) -> dict[str, float]:
        """One update of the GRPO family on ``samples``: PPO-clip against the rollout logprobs,
        aggregated by ``algo.aggregation``, plus ``kl_coef`` x KL (``algo.kl_estimator``) to the
        base model or the rollout-time policy (``algo.kl_reference``). The per-token advantage is
        the reasoning family's plus the tool family's, each on its tokens (``algo.attribution``);
        with ``algo.surgery`` their two gradients are projected (``policies/surgery.py``) first."""
        if self.algo.surgery:
            return self._surgery_step(samples)
        return self._update(samples, "train_step", self._policy_loss(("adv_reasoning", "adv_tool"), kl=True))

    def _policy_loss(
        self, streams: tuple[str, ...], *, kl: bool
    ) -> Callable[..., tuple[torch.Tensor, dict[str, float]]]:
        """The micro-batch loss for the advantages of ``streams`` (summed per token), with the KL
        term when ``kl``."""
        import torch

        from policies.losses import aggregate, k3_kl, kl_penalty, masked_mean, ppo_clip_loss

        algo, mode = self.algo, self.algo.aggregation

        def micro_loss(
            batch: dict[str, torch.Tensor], total: float, rows: float
        ) -> tuple[torch.Tensor, dict[str, float]]:
            lp, mask = self._logprobs(self._engine, batch), batch["mask"]
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
                mode=mode,  # type: ignore[arg-type]
                max_len=self.max_len,
            )
            loss, kl_value = pg, 0.0
            with torch.no_grad():
                # k3 of the rollout policy against the current one: train/inference mismatch + drift.
                rollout_kl = float(masked_mean(k3_kl(lp, batch["old"]), mask, denominator=total))
                ref_lp = None
                if kl and algo.kl_coef > 0:
                    ref_lp = self._logprobs(self._ref, batch) if self._ref is not None else batch["old"]
            if ref_lp is not None:
                per_token = kl_penalty(lp, ref_lp, algo.kl_estimator, mask=mask)
                kl_term = aggregate(per_token, mask, mode, max_len=self.max_len, denominator=denominator)  # type: ignore[arg-type]
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

    def _surgery_step(self, samples: list[TrainSample]) -> dict[str, float]:
        """Bidirectional gradient surgery (paper 000, §3.3.3, eq. 11): the reasoning and the tool
        objective's gradients on the shared parameters, each projected off the other when they
        conflict (both from the original pair), summed, plus the KL term's gradient, one update."""
        import torch

        from policies.surgery import gram

        if self.cfg.zero_stage != 0 or self.dtype == "bfloat16":
            raise LearnerError(
                "algorithm.surgery needs learner.zero_stage 0 and float32 weights (the two objectives' "
                f"gradients are read from the parameters' .grad); got zero_stage {self.cfg.zero_stage}, {self.dtype}"
            )
        params = [p for p in self._engine.module.parameters() if p.requires_grad]
        grads: dict[str, torch.Tensor] = {}
        metrics: dict[str, float] = {}
        per_stream: dict[str, float] = {}
        for stream in ("adv_reasoning", "adv_tool"):
            parts = self._accumulate(samples, "train_step", self._policy_loss((stream,), kl=False))
            grads[stream] = torch.cat([_grad(p).flatten() for p in params])
            per_stream[f"pg_loss_{stream.removeprefix('adv_')}"] = parts["pg_loss"]
            metrics = parts | per_stream
        metrics["pg_loss"] = metrics["pg_loss_reasoning"] + metrics["pg_loss_tool"]
        metrics["loss"] = metrics["pg_loss"]
        g_r, g_t = grads["adv_reasoning"], grads["adv_tool"]
        before = gram(g_r, g_t)
        c_r, c_t = before.coefficients()  # g_r' = g_r - c_r g_t, g_t' = g_t - c_t g_r (0 when compatible)
        update = (g_r - c_r * g_t) + (g_t - c_t * g_r)
        self._engine.optimizer.zero_grad()
        if self.algo.kl_coef > 0:  # the regulariser is shared, never projected
            kl_parts = self._accumulate(samples, "train_step", self._kl_only_loss())
            metrics["kl"] = kl_parts["kl"]
            metrics["loss"] += self.algo.kl_coef * kl_parts["kl"]
            update = update + torch.cat([_grad(p).flatten() for p in params])
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = update[offset : offset + n].view_as(p).to(p.dtype).clone()
            offset += n
        conflict = self._conflicts.update(before.cosine)
        metrics["grad_norm"] = self._optimizer_step()
        return metrics | conflict | {"surgery_conflict": float(before.conflict)}

    def _kl_only_loss(self) -> Callable[..., tuple[torch.Tensor, dict[str, float]]]:
        import torch

        from policies.losses import aggregate, kl_penalty

        algo, mode = self.algo, self.algo.aggregation

        def micro_loss(
            batch: dict[str, torch.Tensor], total: float, rows: float
        ) -> tuple[torch.Tensor, dict[str, float]]:
            lp, mask = self._logprobs(self._engine, batch), batch["mask"]
            with torch.no_grad():
                ref_lp = self._logprobs(self._ref, batch) if self._ref is not None else batch["old"]
            per_token = kl_penalty(lp, ref_lp, algo.kl_estimator, mask=mask)
            denominator = total if mode == "token-mean" else rows
            kl_term = aggregate(per_token, mask, mode, max_len=self.max_len, denominator=denominator)  # type: ignore[arg-type]
            return algo.kl_coef * kl_term, {"kl": float(kl_term.detach())}

        return micro_loss

    def sft_step(self, samples: list[TrainSample], lr: float | None = None) -> dict[str, float]:
        """One supervised update: mean NLL of the trainable tokens; ``lr`` overrides the RL lr for this step."""

        from policies.losses import sft_loss

        def micro_loss(
            batch: dict[str, torch.Tensor], total: float, rows: float
        ) -> tuple[torch.Tensor, dict[str, float]]:
            loss = sft_loss(self._logprobs(self._engine, batch), batch["mask"], denominator=total)
            return loss, {"loss": float(loss.detach())}

        groups = self._optimizer.param_groups
        saved = [g["lr"] for g in groups]
        try:
            for g in groups:
                g["lr"] = saved[0] if lr is None else lr
            metrics = self._update(samples, "sft_step", micro_loss)
        finally:
            for g, value in zip(groups, saved, strict=True):
                g["lr"] = value
        return metrics | {"lr": saved[0] if lr is None else lr}

    def _update(
        self,
        samples: Sequence[TrainSample],
        where: str,
        micro_loss: Callable[[dict[str, torch.Tensor], float, float], tuple[torch.Tensor, dict[str, float]]],
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
        micro_loss: Callable[[dict[str, torch.Tensor], float, float], tuple[torch.Tensor, dict[str, float]]],
    ) -> dict[str, float]:
        """Backward of ``micro_loss`` over every micro-batch into fresh ``.grad``s (no update)."""
        self._validate(samples, where)
        active = [s for s in samples if any(s.trainable)]
        if not active:
            raise LearnerError(
                f"{where}: none of the {len(samples)} samples has a trainable token; nothing to train"
            )
        total = float(sum(sum(s.trainable) for s in active))
        sums: dict[str, float] = {}
        self._engine.train()
        self._engine.optimizer.zero_grad()
        try:
            for chunk in _chunks(active, self.cfg.micro_batch_size):
                loss, parts = micro_loss(self._collate(chunk), total, float(len(active)))
                self._engine.backward(loss, scale_wrt_gas=False)
                for key, value in parts.items():
                    combine = max if key.endswith("_max") else operator.add
                    sums[key] = combine(sums[key], value) if key in sums else value
        except BaseException:
            # A failed micro-batch must not leave half a step's gradients for the next step.
            self._engine.optimizer.zero_grad()
            raise
        return sums | {
            "tokens": float(sum(len(s.token_ids) for s in active)),
            "trainable_tokens": total,
            "samples": float(len(active)),
            "skipped": float(len(samples) - len(active)),
        }

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
            for chunk in _chunks(samples, self.cfg.micro_batch_size):
                lp = self._logprobs(self._engine, self._collate(chunk)).cpu()
                out.extend(lp[row, : len(s.token_ids)].tolist() for row, s in enumerate(chunk))
        self._engine.train()
        return out

    # -- weights out ------------------------------------------------------------------------------

    def _full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every weight as its own contiguous CPU tensor in the model dtype, ``lm_head.weight`` included."""
        import contextlib

        import deepspeed

        module = self._engine.module
        gather: Any = contextlib.nullcontext()
        if self.cfg.zero_stage == 3:
            gather = deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None)
        with gather:
            # copy=True: tied tensors become independent copies (safetensors refuses shared storage).
            state = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in module.state_dict().items()}
            head = module.get_output_embeddings()
            if "lm_head.weight" not in state and head is not None:
                state["lm_head.weight"] = head.weight.detach().to("cpu", copy=True).contiguous()
        return state

    def export_weights(self, path: str) -> str:
        """Write the full state dict as safetensors at ``path`` (atomically, via a rename); returns ``path``."""
        from safetensors.torch import save_file

        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        save_file(self._full_state_dict(), tmp, metadata={"format": "pt", "version": str(self._version)})
        os.replace(tmp, path)
        return path

    # -- checkpoints ------------------------------------------------------------------------------

    def save_checkpoint(self, dir: str) -> None:
        """DeepSpeed checkpoint (weights, optimizer, version, RNG) in ``dir``, plus a loadable HF model
        in ``dir/hf``. The learning rate is constant (no scheduler state to keep)."""
        import torch

        client_state = {"version": self._version, "torch_rng": torch.get_rng_state()}
        self._engine.save_checkpoint(dir, tag=f"version{self._version}", client_state=client_state)
        hf_dir = os.path.join(dir, "hf")
        self._engine.module.save_pretrained(hf_dir, state_dict=self._full_state_dict())
        for name in os.listdir(self.model_path):
            src = os.path.join(self.model_path, name)
            if os.path.isfile(src) and name != "config.json" and not name.endswith(_WEIGHT_SUFFIXES):
                shutil.copy2(src, os.path.join(hf_dir, name))

    def load_checkpoint(self, dir: str) -> None:
        """Restore weights, optimizer state, RNG and ``version`` from the latest DeepSpeed checkpoint in ``dir``."""
        import torch

        load_path, client_state = self._engine.load_checkpoint(dir)
        if load_path is None:
            raise LearnerError(
                f"load_checkpoint: no DeepSpeed checkpoint in {dir} (expected a 'latest' file)"
            )
        if not client_state or "version" not in client_state:
            raise LearnerError(
                f"load_checkpoint: checkpoint {load_path} has no 'version' in its client state"
            )
        self._version = int(client_state["version"])
        if "torch_rng" in client_state:
            torch.set_rng_state(client_state["torch_rng"])


def remote_learner(**ray_options: Any) -> Any:
    """The Ray actor class for ``Learner`` (created lazily so importing this module never imports ray)."""
    from actors.remote import remote_class

    return remote_class(Learner, **ray_options)
