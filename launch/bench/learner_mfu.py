"""The learner's GRPO update on a GPU: tokens/s, MFU and peak memory, per model size.

    python -m launch.bench.learner_mfu [--arch smollm2-135m qwen2.5-0.5b ...] [--samples 32]
        [--context 2048] [--generated 256] [--micro-batch 8] [--repeats 5] [--dtype bfloat16]
        [--peak-tflops 989] [--out FILE] [--quick]

Each architecture's model is built from its published config with random weights (the GPU
machines this runs on reach no model hub, and a throughput figure does not depend on the weights),
saved to a temporary directory, and loaded by ``actors.learner.Learner`` as a run would load it.
``Learner.train_step`` (PPO-clip forward with logits only where the loss needs them, backward,
DeepSpeed's clipped AdamW step) is then timed on agent-shaped samples (``learner_logits.samples``:
a long context of prompt and observations with two short generated spans), each architecture in
a child process of its own so that its peak memory is its own.

Model FLOPs of a step (``train_flops``, the convention of torchtitan and the PaLM paper's
appendix B): 6 x (non-embedding weights) per token, 12 x layers x attention width x sequence
length per token for the attention scores (the full square, not halved for causality), and
6 x hidden x vocabulary for each position whose logits the loss needs (the output projection runs
only there). MFU = model FLOPs / step seconds / ``--peak-tflops`` (989: the H100/H200 SXM dense bf16
figure). The last line: ``learner_mfu: <arch>_tok_s=... <arch>_mfu=... ...`` (``qwen2_5_0_5b_tok_s``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# The published configs (Hugging Face ``config.json``) of the sizes a user would train, trimmed to
# the fields that shape the compute; ``tiny-llama`` is the quick mode's, for CPUs.
ARCHITECTURES: dict[str, dict[str, Any]] = {
    "tiny-llama": dict(
        model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=512, tie_word_embeddings=True,
    ),
    "smollm2-135m": dict(
        model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, vocab_size=49152, max_position_embeddings=8192,
        rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
    ),
    "qwen2.5-0.5b": dict(
        model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
        num_attention_heads=14, num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
    ),
    "qwen2.5-1.5b": dict(
        model_type="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
        num_attention_heads=12, num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
    ),
    "qwen2.5-3b": dict(
        model_type="qwen2", hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
        num_attention_heads=16, num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
    ),
}  # fmt: skip
DEFAULT_ARCHS = ("smollm2-135m", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b")
CHILD_SETTINGS = ("samples", "context", "generated", "micro_batch", "repeats", "dtype", "peak_tflops")
"""What a child process (one architecture) is told, besides ``--checkpointing``."""


def train_flops(
    *, body_params: int, layers: int, attention_width: int, hidden: int, vocab: int,
    sequences: int, seq_len: int, head_positions: int,
) -> float:  # fmt: skip
    """Model FLOPs of one forward + backward over ``sequences`` rows of ``seq_len`` tokens, the
    output projection run at ``head_positions`` positions of each row (see the module docstring).
    ``body_params``: the weights outside the embedding and the output projection."""
    tokens = sequences * seq_len
    body = 6 * body_params * tokens
    scores = 12 * layers * attention_width * seq_len * tokens
    head = 6 * hidden * vocab * head_positions * sequences
    return float(body + scores + head)


def model_config(arch: str) -> Any:
    """``arch``'s Hugging Face config."""
    from transformers import AutoConfig

    fields = dict(ARCHITECTURES[arch])
    return AutoConfig.for_model(fields.pop("model_type"), **fields)


def model_shape(model: Any) -> dict[str, int]:
    """The figures ``train_flops`` takes, read off a built model (a tied output projection counted once)."""
    config = model.config
    embeddings = {id(model.get_input_embeddings().weight), id(model.get_output_embeddings().weight)}
    params = list(model.parameters())  # tied weights appear once
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return {
        "params": sum(p.numel() for p in params),
        "body_params": sum(p.numel() for p in params if id(p) not in embeddings),
        "layers": config.num_hidden_layers,
        "attention_width": heads * head_dim,
        "hidden": config.hidden_size,
        "vocab": config.vocab_size,
    }


def build_model(arch: str, directory: str, dtype: str) -> dict[str, int]:
    """Write ``arch``'s model with random weights to ``directory``; its ``model_shape``."""
    import torch
    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):  # random init on the GPU: seconds, where a 3B model takes minutes on CPUs
        model = AutoModelForCausalLM.from_config(model_config(arch), dtype=getattr(torch, dtype))
    model.save_pretrained(directory)
    return model_shape(model)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """One architecture (``args.arm``): build, load into a Learner, time ``train_step``."""
    import tempfile

    import torch

    from actors.learner import Learner
    from launch.bench.learner_logits import samples
    from specs.algorithm import GrpoConfig
    from specs.config import LearnerConfig

    cuda = torch.cuda.is_available()
    with tempfile.TemporaryDirectory() as directory:
        t0 = time.perf_counter()
        shape = build_model(args.arm, directory, args.dtype)
        built_s = time.perf_counter() - t0
        cfg = LearnerConfig(
            lr=1e-6, micro_batch_size=args.micro_batch, gradient_checkpointing=args.checkpointing
        )
        trainer = Learner(directory, cfg, GrpoConfig(), dtype=args.dtype, seed=0, max_len=args.context)
    batch = samples(args.samples, args.context, args.generated, shape["vocab"])

    def timed_step() -> float:
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        metrics = trainer.train_step(batch)
        if cuda:
            torch.cuda.synchronize()
        if metrics["samples"] != len(batch):
            raise RuntimeError(f"{args.arm}: the step trained {metrics['samples']} of {len(batch)} samples")
        return time.perf_counter() - start

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    timed_step()  # warm-up: kernels' autotuning, the allocator, the optimizer's state
    seconds = sorted(timed_step() for _ in range(args.repeats))
    step_s = seconds[len(seconds) // 2]
    flops = train_flops(
        body_params=shape["body_params"], layers=shape["layers"], attention_width=shape["attention_width"],
        hidden=shape["hidden"], vocab=shape["vocab"], sequences=args.samples, seq_len=args.context,
        head_positions=args.generated,
    )  # fmt: skip
    return {
        "arch": args.arm,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "dtype": args.dtype,
        "params": shape["params"],
        "step_s": step_s,
        "step_s_min": seconds[0],
        "step_s_max": seconds[-1],
        "tokens_per_s": args.samples * args.context / step_s,
        "tflops": flops / step_s / 1e12,
        "mfu": flops / step_s / (args.peak_tflops * 1e12),
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan"),
        "build_s": built_s,
    }


def run_arm(argv: Sequence[str], arch: str, timeout_s: float) -> dict[str, Any]:
    """One architecture in a child process; its figures, or the error it ended with."""
    import subprocess

    command = [sys.executable, "-m", "launch.bench.learner_mfu", *argv, "--arm", arch]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"arch": arch, "error": f"no result within {timeout_s:.0f} s"}
    if done.returncode != 0:
        return {"arch": arch, "error": f"exit {done.returncode}: {done.stderr[-3000:]}"}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--arch", nargs="+", choices=sorted(ARCHITECTURES), default=list(DEFAULT_ARCHS))
    parser.add_argument("--samples", type=int, default=32, help="sequences in the step (default 32)")
    parser.add_argument("--context", type=int, default=2048, help="tokens a sequence (default 2048)")
    parser.add_argument(
        "--generated", type=int, default=256, help="trainable tokens a sequence (default 256)"
    )
    parser.add_argument("--micro-batch", type=int, default=8, help="sequences a forward (default 8)")
    parser.add_argument("--checkpointing", action="store_true", help="gradient checkpointing on")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps after one warm-up (default 5)")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument(
        "--peak-tflops", type=float, default=989.0, help="the device's dense peak (default 989)"
    )
    parser.add_argument("--arm-timeout", type=float, default=300.0, help="seconds an architecture may take")
    parser.add_argument("--out", help="also write every architecture's figures to this JSON file")
    parser.add_argument(
        "--quick", action="store_true", help="tiny-llama, 2 x 128 tokens, float32 (the test's run)"
    )
    parser.add_argument("--arm", choices=sorted(ARCHITECTURES), help=argparse.SUPPRESS)  # a child's one arch
    args = parser.parse_args(argv)
    if args.quick:
        args.arch, args.samples, args.context, args.generated = ["tiny-llama"], 2, 128, 16
        args.micro_batch, args.repeats, args.dtype = 1, 1, "float32"
    if args.arm:
        print(json.dumps(measure(args)), flush=True)
        return 0
    child = [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in CHILD_SETTINGS]
    child += ["--checkpointing"] if args.checkpointing else []
    results = []
    for arch in args.arch:
        print(f"[{arch}] building and timing {args.repeats} steps ...", flush=True)
        results.append(run_arm(child, arch, args.arm_timeout))
        print(json.dumps(results[-1])[:3000], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)
    print(
        f"\n{'arch':<14} {'params':>8} {'step s':>7} {'tok/s':>9} {'TFLOP/s':>8} {'MFU':>6} {'peak GiB':>9}"
        f"   ({args.samples} x {args.context} tokens, {args.generated} trainable, micro-batch "
        f"{args.micro_batch}, {args.dtype})"
    )
    for r in results:
        if "error" in r:
            print(f"{r['arch']:<14} failed: {r['error'].splitlines()[-1] if r['error'] else ''}")
            continue
        print(
            f"{r['arch']:<14} {r['params'] / 1e9:7.2f}B {r['step_s']:7.2f} {r['tokens_per_s']:9.0f} "
            f"{r['tflops']:8.1f} {r['mfu']:6.1%} {r['peak_memory_gib']:9.1f}"
        )
    done = [r for r in results if "error" not in r]
    keys = {r["arch"]: re.sub(r"\W", "_", r["arch"]) for r in done}  # qwen2.5-0.5b -> qwen2_5_0_5b
    figures = " ".join(
        f"{keys[r['arch']]}_tok_s={r['tokens_per_s']:.1f} {keys[r['arch']]}_mfu={r['mfu']:.4g}" for r in done
    )
    print(f"learner_mfu: {figures}", flush=True)
    return 0 if len(done) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
