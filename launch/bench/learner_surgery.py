"""Gradient surgery's update with one forward per loss against one forward shared by the losses.

    python -m launch.bench.learner_surgery [--model DIR] [--samples 8] [--context 850] [--generated 65]
        [--repeats 3] [--kl 0.0] [--quick]

Paper 000's surgery (``algorithm.surgery``) needs the reasoning and the tool family's gradients
apart, and the KL term's when ``kl_coef`` > 0. Times ``Learner.train_step`` with surgery, which
runs each micro-batch's forward once and backs each loss through its kept graph
(``Learner._accumulate_apart``), against the same update computed as it was before: one full
forward and backward per loss (``Learner._accumulate`` per family, then the same projection and
step). Same weights, same agent-shaped batch (``learner_logits.samples``, with the first 60% of
every generated span marked as reasoning), arms alternated step by step so that a noisy machine
weighs on both. Prints each arm's median seconds per step and the ratio (that the two compute the
same update is ``tests/test_learner.py``'s).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from launch.bench.learner_logits import add_shape_arguments  # noqa: E402
from launch.bench.learner_logits import samples as plain_samples  # noqa: E402

if TYPE_CHECKING:
    from actors.learner import Learner
    from policies.types import TrainSample


def samples(n: int, context: int, generated: int, vocab: int) -> list[TrainSample]:
    """``learner_logits.samples`` with reasoning (the first 60% of each generated span, as a
    ``<think>`` agent's turn) and a reasoning advantage that disagrees with the tool one on half."""
    import msgspec

    return [
        msgspec.structs.replace(
            s, reasoning=_reasoning(s.trainable), reasoning_advantage=s.advantage * (1.0 if i % 2 else -0.5)
        )
        for i, s in enumerate(plain_samples(n, context, generated, vocab))
    ]


def _reasoning(trainable: list[int]) -> list[int]:
    """The first 60% of every run of trainable tokens."""
    mask, run = [0] * len(trainable), []
    for position, t in enumerate([*trainable, 0]):
        if t:
            run.append(position)
        elif run:
            for p in run[: int(0.6 * len(run))]:
                mask[p] = 1
            run = []
    return mask


def separate_passes(learner: Learner, batch: list[TrainSample]) -> None:
    """The surgery update as the learner computed it before the shared forward: a full forward
    and backward over the step per loss, then the same projection, KL gradient and step."""
    from actors.learner_losses import kl_loss, policy_loss
    from policies.surgery import assign_grads, flatten_grads, project

    params = learner._trained_params()
    grads = []
    for stream in ("adv_reasoning", "adv_tool"):
        loss = policy_loss(learner.algo, learner.max_len, learner._policy, None, (stream,), kl=False)
        learner._accumulate(batch, "separate passes", loss)
        grads.append(flatten_grads(params))
    projected_r, projected_t = project(*grads)
    update = projected_r + projected_t
    if learner.algo.kl_coef > 0:
        shared = kl_loss(learner.algo, learner.max_len, learner._policy, learner._reference())
        learner._accumulate(batch, "separate passes", shared)
        update = update + flatten_grads(params)
    assign_grads(params, update)
    learner._optimizer_step()


def measure(args: argparse.Namespace) -> dict[str, float]:
    from actors.learner import Learner
    from specs.algorithm import GrpoConfig
    from specs.config import LearnerConfig

    def learner() -> Learner:
        algo = GrpoConfig(attribution="masked", surgery=True, kl_coef=args.kl, kl_reference="rollout")
        return Learner(args.model, LearnerConfig(lr=1e-6, micro_batch_size=1), algo, seed=0)

    shared, separate = learner(), learner()
    batch = samples(args.samples, args.context, args.generated, shared.vocab_size)
    arms = {"shared": lambda: shared.train_step(batch), "separate": lambda: separate_passes(separate, batch)}
    seconds: dict[str, list[float]] = {name: [] for name in arms}
    for repeat in range(args.repeats + 1):  # the first round warms up the allocator and the optimizer
        for name, step in arms.items():
            start = time.perf_counter()
            step()
            if repeat:
                seconds[name].append(time.perf_counter() - start)
    return {f"{name}_s": sorted(s)[len(s) // 2] for name, s in seconds.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_shape_arguments(parser)
    parser.add_argument("--kl", type=float, default=0.0, help="kl_coef (to the rollout policy): a third loss")
    parser.add_argument(
        "--quick", action="store_true", help="2 samples of 128 tokens, 1 repeat (the test's run)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.samples, args.context, args.generated, args.repeats = 2, 128, 16, 1
    m = measure(args)
    tokens = args.samples * args.context
    for name in ("separate", "shared"):
        step = m[f"{name}_s"]
        print(f"{name + ' forward':<16} step {step:6.1f} s  {tokens / step:7.1f} tok/s", flush=True)
    print(
        f"learner_surgery: speedup={m['separate_s'] / m['shared_s']:.2f}x samples={args.samples} context={args.context} "
        f"generated={args.generated} losses={3 if args.kl > 0 else 2}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
