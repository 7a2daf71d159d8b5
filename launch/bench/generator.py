"""Benchmark: our Generator against plain vLLM on the same prompts, side by side in one run.

What it compares: the throughput of vLLM's own offline batch (``LLM.generate`` on every prompt at
once) and of ``VllmEngine`` driven the way the rollout drives it (one concurrent ``generate`` call
per prompt, batched by vLLM's continuous batching), optionally also through the Ray actor
(``--ray``). Sampling is identical in every arm: temperature 1, ``ignore_eos`` so every turn has
exactly ``--max-tokens`` tokens, the sampled token's logprob requested, no detokenisation.
Only one engine lives at a time: each arm shuts its engine down before the next one starts.

Prints a table and the summary line
``generator: plain_tok_s=X engine_tok_s=Y ratio=Z`` (``ratio`` = engine / plain; ``ray_tok_s`` and
``ray_ratio`` are added with ``--ray``). ``--quick`` (4 prompts, 8 tokens) is what the test suite runs.

    python -m launch.bench.generator [--quick] [--ray] [--prompts 32] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from typing import Any

import anyio

from policies.engine import Engine
from policies.types import SamplingConfig

DEFAULT_MODEL = ".cache/models/SmolLM2-135M-Instruct"


def build_prompts(model: str, count: int) -> list[list[int]]:
    """``count`` chat-templated arithmetic questions as token ids (deterministic)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    prompts = []
    for i in range(count):
        a, b = 17 + 7 * i, 25 + 11 * i
        messages = [{"role": "user", "content": f"What is {a} + {b}? Show your reasoning."}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompts.append(list(tokenizer(text, add_special_tokens=False)["input_ids"]))
    return prompts


def engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "model_path": args.model,
        "dtype": args.dtype,
        "max_model_len": args.max_model_len,
        "kv_cache_gib": args.kv_cache_gib,
        "max_num_seqs": args.max_num_seqs,
        "seed": 0,
    }


def run_plain(args: argparse.Namespace, prompts: list[list[int]]) -> tuple[int, float]:
    """vLLM's offline ``LLM.generate`` over all prompts at once; returns (tokens, seconds)."""
    from vllm import LLM
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import SamplingParams

    from actors.generator import on_gpu

    kw = engine_kwargs(args)
    memory = (
        {"gpu_memory_utilization": 0.4} if on_gpu() else {"kv_cache_memory_bytes": args.kv_cache_gib * 2**30}
    )
    llm = LLM(
        model=kw.pop("model_path"),
        enforce_eager=True,
        **{k: v for k, v in kw.items() if k != "kv_cache_gib"},
        **memory,
    )
    params = SamplingParams(
        temperature=1.0,
        max_tokens=args.max_tokens,
        ignore_eos=True,
        logprobs=0,
        flat_logprobs=True,
        detokenize=False,
    )
    inputs = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    try:
        llm.generate(inputs[:1], params, use_tqdm=False)  # warm-up outside the timing
        start = time.perf_counter()
        outputs = llm.generate(inputs, params, use_tqdm=False)
        seconds = time.perf_counter() - start
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
    return sum(len(o.outputs[0].token_ids) for o in outputs), seconds


async def drive(engine: Engine, prompts: list[list[int]], max_tokens: int) -> tuple[int, float]:
    """One concurrent ``generate`` per prompt, as the rollout issues them; returns (tokens, seconds)."""
    sampling = SamplingConfig(max_tokens=max_tokens, temperature=1.0, ignore_eos=True)
    with anyio.fail_after(600):
        await engine.generate(prompts[0], sampling)  # warm-up outside the timing
    counts: list[int] = []

    async def one(prompt: list[int]) -> None:
        counts.append(len((await engine.generate(prompt, sampling)).token_ids))

    start = time.perf_counter()
    with anyio.fail_after(3600):
        async with anyio.create_task_group() as tg:
            for prompt in prompts:
                tg.start_soon(one, prompt)
    return sum(counts), time.perf_counter() - start


async def run_engine(args: argparse.Namespace, prompts: list[list[int]]) -> tuple[int, float]:
    from actors.generator import VllmEngine

    engine = VllmEngine(**engine_kwargs(args))
    try:
        return await drive(engine, prompts, args.max_tokens)
    finally:
        await engine.shutdown()


async def run_ray(args: argparse.Namespace, prompts: list[list[int]]) -> tuple[int, float]:
    import ray

    from actors.generator import GeneratorHandle, remote_generator
    from actors.remote import AsyncProxy

    owns_ray = not ray.is_initialized()
    if owns_ray:
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    handle = remote_generator(num_cpus=0).remote(**engine_kwargs(args))
    engine: GeneratorHandle = AsyncProxy(handle)
    try:
        return await drive(engine, prompts, args.max_tokens)
    finally:
        await engine.shutdown()
        ray.kill(handle)
        if owns_ray:
            ray.shutdown()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--max-model-len", type=int, default=1024)
    parser.add_argument("--max-num-seqs", type=int, default=32)
    parser.add_argument("--kv-cache-gib", type=int, default=1)
    parser.add_argument("--ray", action="store_true", help="also drive the engine through the Ray actor")
    parser.add_argument("--quick", action="store_true", help="4 prompts x 8 tokens (the test suite's run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts, args.max_tokens = 4, 8
    return args


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parse_args(argv)
    prompts = build_prompts(args.model, args.prompts)
    rows = {"plain LLM.generate": run_plain(args, prompts)}
    rows["VllmEngine (concurrent generate)"] = anyio.run(run_engine, args, prompts)
    if args.ray:
        rows["Ray GeneratorActor"] = anyio.run(run_ray, args, prompts)
    rates = {name: tokens / seconds for name, (tokens, seconds) in rows.items()}
    plain = rates["plain LLM.generate"]
    print(f"\n{args.prompts} prompts x {args.max_tokens} tokens, {args.dtype}, temperature 1, ignore_eos")
    print(f"{'arm':36} {'tokens':>7} {'seconds':>8} {'tok/s':>8} {'ratio':>6}")
    for name, (tokens, seconds) in rows.items():
        print(f"{name:36} {tokens:7d} {seconds:8.2f} {rates[name]:8.1f} {rates[name] / plain:6.2f}")
    summary = {"plain_tok_s": plain, "engine_tok_s": rates["VllmEngine (concurrent generate)"]}
    summary["ratio"] = summary["engine_tok_s"] / plain
    if args.ray:
        summary["ray_tok_s"] = rates["Ray GeneratorActor"]
        summary["ray_ratio"] = summary["ray_tok_s"] / plain
    print("generator: " + " ".join(f"{k}={v:.2f}" for k, v in summary.items()))
    return summary


if __name__ == "__main__":
    main()
