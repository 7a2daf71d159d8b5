"""How much of a run's RL updates was its warm start's AdamW momentum, not the RL gradient?

    python -m launch.bench.warmstart_momentum WARMSTART_CHECKPOINT STEP_CHECKPOINT

Both are learner checkpoints of one run (ZeRO 0; ``actors.learner_checkpoint``): the warm start
the RL steps began from (``<run_dir>/warmstart`` of a run with ``warmstart.save``) and a later
step checkpoint (``<run_dir>/checkpoint/step-NNNN``). When RL goes on with the warm start's
moments (``warmstart.reset_optimizer: false``), AdamW keeps moving the weights along them even
where the RL gradient is nothing: after the warm start's ``t`` updates, with moments ``m`` and
``v``, ``N`` more updates with zero gradient move each weight by::

    pred = -sum_{k=1..N} lr * (b1^k m / (1 - b1^(t+k))) / (sqrt(b2^k v / (1 - b2^(t+k))) + eps)

(``momentum_only_movement``; ``lr``, betas and eps are the step checkpoint's, weight decay must
be 0). The bench prints the actual movement ``w_N - w_0``, ``pred``, and their cosine: near 1,
the RL steps mostly continued the warm start; near 0, the RL gradient set their direction. The
last line: ``warmstart_momentum: steps=<N> actual=<|w_N - w_0|> momentum_only=<|pred|> cos=<c>``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def momentum_only_movement(
    m: Any, v: Any, *, t: int, steps: int, lr: float, betas: tuple[float, float], eps: float
) -> Any:
    """The change AdamW makes to a weight in ``steps`` updates with zero gradient, from moments
    ``m`` and ``v`` after ``t`` updates (the module docstring's ``pred``)."""
    b1, b2 = betas
    total = m * 0.0
    for k in range(1, steps + 1):
        m_hat = (b1**k) * m / (1 - b1 ** (t + k))
        v_hat = (b2**k) * v / (1 - b2 ** (t + k))
        total = total - lr * m_hat / (v_hat.sqrt() + eps)
    return total


@dataclass(frozen=True)
class Movement:
    steps: int
    actual: float
    """``|w_N - w_0|``, over every trained weight."""
    momentum_only: float
    """``|pred|``."""
    cosine: float
    """``cos(w_N - w_0, pred)``."""


def _states(checkpoint_dir: str) -> dict[str, Any]:
    import torch

    latest = os.path.join(checkpoint_dir, "latest")
    if not os.path.isfile(latest):
        raise SystemExit(f"{checkpoint_dir}: no DeepSpeed checkpoint (expected a 'latest' file)")
    with open(latest) as f:
        tag = f.read().strip()
    path = os.path.join(checkpoint_dir, tag, "mp_rank_00_model_states.pt")
    if not os.path.isfile(path):
        raise SystemExit(f"{path}: missing (only ZeRO stage 0 checkpoints keep the optimizer there)")
    states: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=False)
    return states


def _parameter_names(hf_dir: str) -> list[str]:
    """The model's trained weights in ``parameters()`` order, the optimizer's (tied ones once),
    from the checkpoint's HF config on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(hf_dir))
    return [name for name, _ in model.named_parameters()]


def compare(warmstart_dir: str, step_dir: str) -> Movement:
    """The module docstring's comparison, weight by weight in the optimizer's order."""
    warm, later = _states(warmstart_dir), _states(step_dir)
    optimizer = warm["optimizer"]
    (group,) = later["optimizer"]["param_groups"]
    if group.get("weight_decay", 0.0):
        raise SystemExit(f"{step_dir}: weight decay {group['weight_decay']}: the prediction assumes 0")
    names = _parameter_names(os.path.join(warmstart_dir, "hf"))
    indices = [i for g in optimizer["param_groups"] for i in g["params"]]
    steps = int(later["version"]) - int(warm["version"])
    actual_sq = pred_sq = dot = 0.0
    for name, index in zip(names, indices, strict=True):
        state = optimizer["state"][index]
        pred = momentum_only_movement(
            state["exp_avg"].double(),
            state["exp_avg_sq"].double(),
            t=int(state["step"]),
            steps=steps,
            lr=group["lr"],
            betas=tuple(group["betas"]),
            eps=group["eps"],
        )
        moved = later["module"][name].double() - warm["module"][name].double()
        actual_sq += float((moved * moved).sum())
        pred_sq += float((pred * pred).sum())
        dot += float((moved * pred).sum())
    cosine = dot / math.sqrt(actual_sq * pred_sq) if actual_sq and pred_sq else float("nan")
    return Movement(steps, math.sqrt(actual_sq), math.sqrt(pred_sq), cosine)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m launch.bench.warmstart_momentum",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("warmstart", help="the warm start's checkpoint directory (<run_dir>/warmstart)")
    parser.add_argument(
        "step", help="a later step checkpoint of the same run (<run_dir>/checkpoint/step-NNNN)"
    )
    args = parser.parse_args(argv)
    result = compare(args.warmstart, args.step)
    if result.steps < 1:
        print(f"{args.step} is not later than {args.warmstart}", file=sys.stderr)
        return 2
    print(
        f"warmstart_momentum: steps={result.steps} actual={result.actual:.4f} "
        f"momentum_only={result.momentum_only:.4f} cos={result.cosine:.3f}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
