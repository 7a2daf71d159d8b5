"""The learner MFU bench's arithmetic: model FLOPs of a step, and the shapes it reads off a model."""

from __future__ import annotations

import pytest

from launch.bench.learner_mfu import ARCHITECTURES, model_config, model_shape, train_flops


def test_train_flops_adds_weights_attention_scores_and_the_output_projection_where_kept() -> None:
    flops = train_flops(
        body_params=10,
        layers=2,
        attention_width=4,
        hidden=3,
        vocab=5,
        sequences=2,
        seq_len=7,
        head_positions=1,
    )
    tokens = 2 * 7
    assert flops == 6 * 10 * tokens + 12 * 2 * 4 * 7 * tokens + 6 * 3 * 5 * 1 * 2


@pytest.mark.parametrize(
    ("arch", "params", "body_params"),
    [
        ("smollm2-135m", 134_515_008, 134_515_008 - 49152 * 576),  # the checkpoint's own count
        # Qwen's model cards: 0.49B (0.36B non-embedding) and 1.54B (1.31B non-embedding)
        ("qwen2.5-0.5b", 494_032_768, 494_032_768 - 151936 * 896),
        ("qwen2.5-1.5b", 1_543_714_304, 1_543_714_304 - 151936 * 1536),
    ],
)
def test_the_architectures_have_their_published_sizes(arch: str, params: int, body_params: int) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):  # shapes only: no memory, no init
        model = AutoModelForCausalLM.from_config(model_config(arch))
    shape = model_shape(model)
    assert (shape["params"], shape["body_params"]) == (params, body_params)
    assert shape["vocab"] == ARCHITECTURES[arch]["vocab_size"]
