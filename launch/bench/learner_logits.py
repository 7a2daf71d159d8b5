"""The learner's update with logits at every position against logits only where a loss needs them.

    python -m launch.bench.learner_logits [--model DIR] [--samples 8] [--context 850] [--generated 65]
        [--repeats 3] [--quick]

Builds agent-shaped samples (a long context of prompt and observations, a few short generated
spans: the calculator demo's shape by default) and times ``Learner.train_step`` on them with
``forward_logprobs`` projecting every position onto the vocabulary (``every_token``) and with only
the positions that score a trainable token (``logits_to_keep``, the default): same weights, same
batch, each arm in a fresh process of its own so that its peak RSS is its own. Prints each arm's
median seconds per step, tokens/s, peak RSS and the kernel's share of the steps' CPU time, then
the ratios on one line.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

if TYPE_CHECKING:
    from policies.types import TrainSample


ARMS = ("every", "kept")


def samples(n: int, context: int, generated: int, vocab: int) -> list[TrainSample]:
    """``n`` sequences of ``context`` tokens whose ``generated`` trainable tokens are two spans (a
    tool call, then the answer after its observation), advantages of mixed sign."""
    import random

    from policies import types

    rng = random.Random(0)
    out = []
    first = generated // 2
    starts = (int(context * 0.8), context - (generated - first))
    for i in range(n):
        ids = [rng.randrange(1, vocab) for _ in range(context)]
        trainable = [0] * context
        for start, length in zip(starts, (first, generated - first), strict=True):
            trainable[start : start + length] = [1] * length
        logprobs = [-2.0 if t else 0.0 for t in trainable]
        out.append(
            types.TrainSample(token_ids=ids, trainable=trainable, logprobs=logprobs, advantage=(-1.0) ** i)
        )
    return out


def add_shape_arguments(parser: argparse.ArgumentParser) -> None:
    """The model and the batch's shape (``samples``' arguments) and the timed repeats, as the
    learner benches share them: the calculator demo's shape by default."""
    parser.add_argument("--model", default=".cache/models/SmolLM2-135M-Instruct")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--context", type=int, default=850)
    parser.add_argument("--generated", type=int, default=65)
    parser.add_argument("--repeats", type=int, default=3)


def measure(args: argparse.Namespace, every_token: bool) -> dict[str, float]:
    import functools
    from unittest import mock

    from actors import learner
    from actors.learner import Learner
    from specs.algorithm import GrpoConfig
    from specs.config import LearnerConfig

    trainer = Learner(args.model, LearnerConfig(lr=1e-6), GrpoConfig(), dtype="float32", seed=0)
    batch = samples(args.samples, args.context, args.generated, trainer._engine.module.config.vocab_size)
    forward = functools.partial(learner.forward_logprobs, every_token=every_token)

    seconds, cpu_user, cpu_sys = [], 0.0, 0.0
    with mock.patch.object(learner, "forward_logprobs", forward):
        trainer.train_step(batch)  # warm-up: allocator, the optimizer's state, DeepSpeed's first step
        for _ in range(args.repeats):
            t0, r0 = time.perf_counter(), os.times()
            trainer.train_step(batch)
            r1 = os.times()
            seconds.append(time.perf_counter() - t0)
            cpu_user += r1.user - r0.user
            cpu_sys += r1.system - r0.system
    step_s = sorted(seconds)[len(seconds) // 2]
    return {
        "step_s": step_s,
        "tokens_per_s": args.samples * args.context / step_s,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "kernel_share": cpu_sys / max(cpu_user + cpu_sys, 1e-9),
    }


def run_arm(argv: Sequence[str], arm: str) -> dict[str, float]:
    """One arm in a child process (``--arm``); its measurements from the last line it prints."""
    import json
    import subprocess

    command = [sys.executable, "-m", "launch.bench.learner_logits", *argv, "--arm", arm]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"arm {arm} failed ({done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_shape_arguments(parser)
    parser.add_argument(
        "--quick", action="store_true", help="2 samples of 256 tokens, 1 repeat (the test's run)"
    )
    parser.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)  # a child process's one arm
    args = parser.parse_args(argv)
    if args.quick:
        args.samples, args.context, args.generated, args.repeats = 2, 256, 24, 1
    if args.arm:
        import json

        print(json.dumps(measure(args, every_token=args.arm == "every")), flush=True)
        return 0
    given = list(sys.argv[1:] if argv is None else argv)
    full, kept = (run_arm(given, arm) for arm in ARMS)
    for name, m in (("every position", full), ("kept positions", kept)):
        print(
            f"{name:<16} step {m['step_s']:6.1f} s  {m['tokens_per_s']:7.1f} tok/s  "
            f"peak RSS {m['peak_rss_gib']:.2f} GiB  kernel {m['kernel_share']:.0%} of CPU",
            flush=True,
        )
    print(
        f"learner_logits: speedup={full['step_s'] / kept['step_s']:.2f}x "
        f"peak_rss_ratio={kept['peak_rss_gib'] / full['peak_rss_gib']:.2f} "
        f"samples={args.samples} context={args.context} generated={args.generated}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
