"""Build the small vision-language policy CPU machines can run: a SmolVLM-shaped model (Idefics3: a SigLIP
vision encoder, a pixel-shuffle connector, a Llama text model) whose text model is the shipped
SmolLM2-135M-Instruct, weights and all, and whose vision encoder is small and randomly initialised.

    python -m launch.build_vlm [--text .cache/models/SmolLM2-135M-Instruct] [--out .cache/models/SmolVLM-SmolLM2-135M]

What it is, plainly: a real architecture that vLLM (``smolvlm``) and transformers
(``Idefics3ForConditionalGeneration``) both serve, so the multimodal path (images through the
generator, the recorder and the learner) runs for real on CPU; it does not see anything yet (the
vision encoder and the connector are untrained). Its text is exactly SmolLM2's: the same tokenizer
plus SmolVLM's image tokens (``<fake_token_around_image>``, ``<image>``, ``<global-img>``), the
same weights (the embeddings grow by those rows), and SmolLM2's chat template, which also takes a
message whose content is a list of parts (``{"type": "text", "text": ...}`` as its text, ``{"type":
"image"}`` as ``<image>``), rendering a string content exactly as before. An image is resized to
``--image-size`` (one tile, no splitting) and becomes ``(image_size / patch_size)^2 / scale_factor^2``
``<image>`` tokens: 16 at the defaults. A real VLM takes its place by path.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

IMAGE_TOKENS = ("<fake_token_around_image>", "<image>", "<global-img>")
DEFAULT_TEXT = Path(".cache/models/SmolLM2-135M-Instruct")
DEFAULT_OUT = Path(".cache/models/SmolVLM-SmolLM2-135M")
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% elif part['type'] == 'image' %}{{ '<image>' }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""SmolLM2's template, with list content (text and image parts) as SmolVLM's templates render it."""


def build(text: Path, out: Path, image_size: int = 256, patch_size: int = 16, scale_factor: int = 4) -> Path:
    """Write the model, tokenizer and processor to ``out``; ``out``."""
    import torch
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessor,
        Idefics3Processor,
    )

    if (image_size // patch_size) % scale_factor:
        raise ValueError(f"{image_size // patch_size} patches a side do not shuffle by {scale_factor}")
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(text)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.add_special_tokens({"additional_special_tokens": list(IMAGE_TOKENS)})
    lm = AutoModelForCausalLM.from_pretrained(text, dtype=torch.float32)
    lm.resize_token_embeddings(len(tokenizer))
    text_config = lm.config.to_dict()
    config = Idefics3Config(
        text_config=text_config,
        vision_config={
            "hidden_size": 192,
            "intermediate_size": 768,
            "num_hidden_layers": 2,
            "num_attention_heads": 3,
            "image_size": image_size,
            "patch_size": patch_size,
        },
        scale_factor=scale_factor,
        image_token_id=int(tokenizer.convert_tokens_to_ids("<image>")),  # type: ignore[arg-type]
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=lm.config.tie_word_embeddings,
    )
    model = Idefics3ForConditionalGeneration(config)
    model.model.text_model.load_state_dict(lm.model.state_dict(), strict=True)
    model.lm_head.weight.data.copy_(lm.lm_head.weight.data)
    model.save_pretrained(out)
    image_seq_len = (image_size // patch_size) ** 2 // scale_factor**2
    processor = Idefics3Processor(
        image_processor=Idefics3ImageProcessor(
            do_image_splitting=False,
            size={"longest_edge": image_size},
            max_image_size={"longest_edge": image_size},
        ),
        tokenizer=tokenizer,
        image_seq_len=image_seq_len,
        chat_template=tokenizer.chat_template,
    )
    processor.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--text", type=Path, default=DEFAULT_TEXT)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--image-size", type=int, default=256)
    args = parser.parse_args(argv)
    if not (args.text / "config.json").exists():
        print(f"build_vlm: no text model at {args.text} (run `make model`)", file=sys.stderr)
        return 2
    print(f"build_vlm: wrote {build(args.text, args.out, args.image_size)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
