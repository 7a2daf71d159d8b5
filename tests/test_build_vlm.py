"""The small vision-language policy (``launch/build_vlm.py``): a real Idefics3/SmolVLM-shaped model whose
text model is SmolLM2-135M-Instruct exactly, and whose processor turns a screenshot into its image
tokens; vLLM serves it with an image (slow: the real engine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launch.build_vlm import CHAT_TEMPLATE

TEXT = "<|im_start|>user\nWhat is on the screen? <image><|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture
def vlm(built_vlm: Path) -> Path:
    return built_vlm


def screenshot() -> Any:
    from PIL import Image

    return Image.new("RGB", (640, 480), (200, 30, 30))


def test_its_text_model_is_smollm2_exactly_and_an_image_is_sixteen_tokens(vlm: Path, model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoProcessor, Idefics3ForConditionalGeneration

    processor = AutoProcessor.from_pretrained(vlm)
    model = Idefics3ForConditionalGeneration.from_pretrained(vlm, dtype=torch.float32)
    lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = processor.tokenizer(
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", return_tensors="pt"
    )
    vocab = lm.config.vocab_size
    with torch.no_grad():
        vlm_out = model(input_ids=ids["input_ids"], output_hidden_states=True)
        lm_out = lm(input_ids=ids["input_ids"], output_hidden_states=True)
    # Every layer's output is the same bit for bit, and so is the head on SmolLM2's vocabulary; the
    # logits themselves only agree to rounding, as the VLM's head has the image tokens' rows too and
    # a matmul of another shape may sum in another order (CPU GEMM blocking).
    assert len(vlm_out.hidden_states) == len(lm_out.hidden_states)
    for layer, (a, b) in enumerate(zip(vlm_out.hidden_states, lm_out.hidden_states, strict=True)):
        assert torch.equal(a, b), f"hidden state {layer} differs"
    assert torch.equal(model.lm_head.weight[:vocab], lm.lm_head.weight)
    torch.testing.assert_close(vlm_out.logits[0, :, :vocab], lm_out.logits[0], rtol=0, atol=1e-4)

    inputs = processor(text=TEXT, images=[screenshot()], return_tensors="pt")
    text = processor.tokenizer.decode(inputs["input_ids"][0])
    assert "<fake_token_around_image><global-img>" + "<image>" * 16 + "<fake_token_around_image>" in text
    assert tuple(inputs["pixel_values"].shape) == (1, 1, 3, 256, 256)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 4


def test_its_chat_template_renders_text_as_smollm2s_and_image_parts_as_the_placeholder(
    tokenizer: Any,
) -> None:
    conversation = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
        {"role": "tool", "content": "x"},
    ]
    for messages in (conversation, conversation[1:2]):
        assert tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, chat_template=CHAT_TEMPLATE
        ) == tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    parts = [{"type": "text", "text": "a "}, {"type": "image", "sha256": "0"}, {"type": "text", "text": " b"}]
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "tool", "content": parts}],
        tokenize=False,
        chat_template=CHAT_TEMPLATE,
    )
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>tool\na <image> b<|im_end|>\n"


SERVE = """
import json, sys
from PIL import Image
from vllm import LLM, SamplingParams
llm = LLM(model=sys.argv[1], max_model_len=2048, limit_mm_per_prompt={"image": 2}, seed=0, enforce_eager=True,
          kv_cache_memory_bytes=2**30)  # on CPU: the KV cache, not a share of the host (actors.generator)
try:
    [out] = llm.generate({"prompt": sys.argv[2], "multi_modal_data": {"image": Image.new("RGB", (640, 480), (200, 30, 30))}},
                         SamplingParams(temperature=0.0, max_tokens=8))
finally:
    llm.llm_engine.engine_core.shutdown()
print(json.dumps({"generated": len(out.outputs[0].token_ids), "prompt": len(out.prompt_token_ids)}))
"""


@pytest.mark.slow
def test_vllm_serves_it_with_an_image(vlm: Path) -> None:
    """In a process of its own, as the generator's actor runs vLLM: an engine in the test process
    would share its threads and state with the real-engine tests after it."""
    done = subprocess.run(
        [sys.executable, "-c", SERVE, str(vlm), TEXT], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # 8 new tokens; the prompt's 16 image tokens and their markers expanded by vLLM's processor
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"generated": 8, "prompt": 35}
