"""launch.bench.warmstart_momentum: its prediction is AdamW's own arithmetic, and on real learner
checkpoints it tells RL steps that continued the warm start from RL steps of fresh moments."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import torch

from launch.bench.warmstart_momentum import compare, main, momentum_only_movement
from tests.test_learner import _learner, _sample, tiny_llama


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def test_the_prediction_is_what_adamw_does_with_zero_gradients() -> None:
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(64, dtype=torch.float64))
    optimizer = torch.optim.AdamW([weight], lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    for _ in range(5):  # a history: the moments a warm start leaves
        weight.grad = torch.randn(64, dtype=torch.float64)
        optimizer.step()
    state = optimizer.state[weight]
    m, v, t = state["exp_avg"].clone(), state["exp_avg_sq"].clone(), int(state["step"])
    before = weight.detach().clone()
    for _ in range(3):
        weight.grad = torch.zeros(64, dtype=torch.float64)
        optimizer.step()
    predicted = momentum_only_movement(m, v, t=t, steps=3, lr=1e-2, betas=(0.9, 0.999), eps=1e-8)
    assert torch.allclose(weight.detach() - before, predicted, rtol=1e-9, atol=1e-12)
    assert predicted.abs().max() > 1e-3  # the moments alone move the weight


def test_rl_steps_that_kept_the_moments_follow_them_and_fresh_ones_do_not(
    model_dir: str, tmp_path: Path
) -> None:
    warm = _learner(model_dir, lr=1e-3)
    for i in range(4):
        warm.sft_step([_sample(20 + i, 24, prompt=8)], lr=1e-2)
    warm.save_checkpoint(str(tmp_path / "warmstart"))
    batch = [_sample(40 + i, 20, advantage=(1.0, -1.0)[i % 2]) for i in range(4)]

    kept = _learner(model_dir, lr=1e-3)
    kept.load_checkpoint(str(tmp_path / "warmstart"))
    for _ in range(3):  # a faint RL signal: the steps are the warm start's momentum
        kept.train_step([msgspec.structs.replace(s, advantage=s.advantage * 1e-6) for s in batch])
    kept.save_checkpoint(str(tmp_path / "kept"))
    moved = compare(str(tmp_path / "warmstart"), str(tmp_path / "kept"))
    assert moved.steps == 3
    assert moved.cosine > 0.999 and moved.actual == pytest.approx(moved.momentum_only, rel=1e-3)

    fresh = _learner(model_dir, lr=1e-3)
    fresh.load_checkpoint(str(tmp_path / "warmstart"))
    fresh.reset_optimizer()
    for _ in range(3):
        fresh.train_step(batch)
    fresh.save_checkpoint(str(tmp_path / "fresh"))
    moved = compare(str(tmp_path / "warmstart"), str(tmp_path / "fresh"))
    assert moved.cosine < 0.5 and moved.actual > 0.0


def test_the_cli_names_a_directory_without_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no DeepSpeed checkpoint"):
        main([str(tmp_path), str(tmp_path)])
